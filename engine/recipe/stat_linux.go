//go:build linux

package recipe

import (
	"os"
	"syscall"
	"time"
)

func inodeAndCtime(fi os.FileInfo) (uint64, time.Time) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, time.Time{}
	}
	return uint64(st.Ino), time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec))
}
