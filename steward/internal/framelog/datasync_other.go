//go:build !linux

package framelog

import "os"

// DataSync returns f: without fdatasync, Sync stays an fsync.
func DataSync(f *os.File) File { return f }
