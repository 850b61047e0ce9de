package steward

import "time"

func testClock() time.Time { return time.UnixMilli(1_767_225_600_000) }
