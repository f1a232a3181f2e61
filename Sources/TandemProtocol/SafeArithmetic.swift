/// Arithmetic that cannot trap, for values whose range is not proven where they are used
/// (STYLE.md: "`Int64(x)` and `a + b` on values a peer chose: a trap is a remote crash").
/// Validation at decode keeps such values in range; these keep a missed case from crashing a node.
extension Int64 {
    @inlinable public func addingSaturated(_ other: Int64) -> Int64 {
        let (r, o) = addingReportingOverflow(other)
        return o ? (other > 0 ? .max : .min) : r
    }

    @inlinable public func subtractingSaturated(_ other: Int64) -> Int64 {
        let (r, o) = subtractingReportingOverflow(other)
        return o ? (other < 0 ? .max : .min) : r
    }

    @inlinable public func multipliedSaturated(_ other: Int64) -> Int64 {
        let (r, o) = multipliedReportingOverflow(by: other)
        return o ? ((self < 0) != (other < 0) ? .min : .max) : r
    }
}

extension Int {
    @inlinable public func addingSaturated(_ other: Int) -> Int {
        let (r, o) = addingReportingOverflow(other)
        return o ? (other > 0 ? .max : .min) : r
    }
}
