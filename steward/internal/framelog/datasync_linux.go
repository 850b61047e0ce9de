package framelog

import (
	"os"
	"syscall"
)

// DataSync returns f with Sync made an fdatasync: a frame's durability
// needs its data and the file's size, not its timestamps, and an fsync
// that must also commit an mtime costs a journal commit an fdatasync of a
// preallocated file does not.
func DataSync(f *os.File) File { return dataSyncFile{f} }

type dataSyncFile struct{ *os.File }

func (f dataSyncFile) Sync() error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}
