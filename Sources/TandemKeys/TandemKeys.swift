/// Object keys: point-cloud frames, shape features and the two-stage verifier (issue 14).
public enum TandemKeys {}
