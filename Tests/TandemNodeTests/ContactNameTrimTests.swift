import Foundation
@testable import TandemNodeCore
import XCTest

/// `ContactNames.trimmedWhitespace` (session 12: no Foundation pass over a name that has nothing
/// to trim) gives what `trimmingCharacters(in: .whitespaces)` gives.
final class ContactNameTrimTests: XCTestCase {
    func testTheShortcutTrimsAsFoundationDoes() {
        let cases = ["tdm1abc", " tdm1abc", "tdm1abc ", "\ttdm1abc\t", "Bob", "Bob Smith", "  ", "", "\u{00a0}Bob", "Bob\u{3000}",
                     "Zoë", "ö", "Bob\n", "\nBob", "B", "é Bob", "Bob é", "\u{2003}", "x\u{301}"]
        for text in cases {
            XCTAssertEqual(ContactNames.trimmedWhitespace(text), text.trimmingCharacters(in: .whitespaces), text.debugDescription)
        }
    }
}
