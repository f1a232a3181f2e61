/// An EXIF date and time ("YYYY:MM:DD HH:MM:SS", EXIF 2.32 §4.6.5), the wall-clock time of the
/// camera. Parsed strictly: an unknown date written as zeros or blanks, or any field out of range,
/// is no date at all rather than a wrong one.
struct ExifDateTime: Equatable, Sendable {
    let year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int

    /// From an ASCII value (up to its NUL). Dashes for the date separators and a `T` between date
    /// and time are accepted too (some software writes ISO 8601 into these tags).
    init?(ascii: [UInt8]) {
        let b = Array(ascii.prefix { $0 != 0 })
        guard b.count >= 19 else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for i in range {
                guard (0x30...0x39).contains(b[i]) else { return nil }
                value = value * 10 + Int(b[i] - 0x30)
            }
            return value
        }
        let dateSeparators: Set<UInt8> = [0x3A, 0x2D]   // ':' '-'
        guard dateSeparators.contains(b[4]), dateSeparators.contains(b[7]),
              b[10] == 0x20 || b[10] == 0x54,            // ' ' 'T'
              b[13] == 0x3A, b[16] == 0x3A,
              let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
              let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
              (1...9999).contains(year), (1...12).contains(month),
              (1...ExifDateTime.daysIn(month: month, year: year)).contains(day),
              hour < 24, minute < 60, second <= 60 else { return nil }
        self.year = year; self.month = month; self.day = day
        self.hour = hour; self.minute = minute; self.second = second
    }

    /// The canonical EXIF text, with the terminating NUL (20 bytes).
    var ascii: [UInt8] {
        func pad(_ v: Int, _ width: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        let text = "\(pad(year, 4)):\(pad(month, 2)):\(pad(day, 2)) \(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2))"
        return Array(text.utf8) + [0]
    }

    /// Milliseconds since 1970-01-01 00:00 UTC, reading the wall-clock time at `offset` (UTC if nil).
    func millisecondsSince1970(offset: ExifOffset?) -> Int64 {
        let days = ExifDateTime.daysSince1970(year: year, month: month, day: day)
        let seconds = days * 86_400 + Int64(hour * 3600 + minute * 60 + second) - Int64((offset?.minutes ?? 0) * 60)
        return seconds * 1000
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Days from 1970-01-01 in the proleptic Gregorian calendar. The year is counted from March so
    /// the leap day falls at its end; 400-year cycles have 146 097 days; 719 468 is the day number
    /// of 1970-01-01 counted the same way from 0000-03-01.
    static func daysSince1970(year: Int, month: Int, day: Int) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let cycle = (y >= 0 ? y : y - 399) / 400
        let yearOfCycle = y - cycle * 400
        let monthFromMarch = month > 2 ? month - 3 : month + 9
        let dayOfYear = (153 * monthFromMarch + 2) / 5 + day - 1
        let dayOfCycle = yearOfCycle * 365 + yearOfCycle / 4 - yearOfCycle / 100 + dayOfYear
        return Int64(cycle) * 146_097 + Int64(dayOfCycle) - 719_468
    }
}

/// An EXIF time offset from UTC ("+HH:MM", OffsetTime* tags of EXIF 2.31).
struct ExifOffset: Equatable, Sendable {
    /// Minutes east of UTC.
    let minutes: Int

    init?(ascii: [UInt8]) {
        let b = Array(ascii.prefix { $0 != 0 })
        guard b.count >= 6, b[0] == 0x2B || b[0] == 0x2D, b[3] == 0x3A,
              [1, 2, 4, 5].allSatisfy({ (0x30...0x39).contains(b[$0]) }) else { return nil }
        let hours = Int(b[1] - 0x30) * 10 + Int(b[2] - 0x30)
        let mins = Int(b[4] - 0x30) * 10 + Int(b[5] - 0x30)
        guard hours <= 14, mins < 60 else { return nil }
        minutes = (b[0] == 0x2D ? -1 : 1) * (hours * 60 + mins)
    }

    /// The canonical text with its NUL (7 bytes).
    var ascii: [UInt8] {
        let a = abs(minutes)
        let h = a / 60, m = a % 60
        let text = (minutes < 0 ? "-" : "+") + (h < 10 ? "0" : "") + String(h) + ":" + (m < 10 ? "0" : "") + String(m)
        return Array(text.utf8) + [0]
    }
}
