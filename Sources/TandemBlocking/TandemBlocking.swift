/// Blocking while a mode is locked: hosts file, app guard, hooks (issue 14).
public enum TandemBlocking {}
