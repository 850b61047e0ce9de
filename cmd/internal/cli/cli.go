// Package cli is the little the meshd command-line tools share: how they
// start, stop on a signal, turn an error into an exit status, and read a
// file named on the command line without trusting what it is.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"syscall"
)

// ErrUsage marks an error caused by how a command was called; it exits 2.
var ErrUsage = errors.New("usage")

// The refusals of ReadFileLimit.
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("file too large")
)

// ReadFileLimit reads the whole of the regular file at path, refusing one
// of more than max bytes. A path on the command line may name anything: a
// FIFO would block a plain open until a writer came, and /dev/zero or a huge
// file would be read into memory without end. So the file is opened
// non-blocking and judged by what was opened (not by the path, which could
// be swapped in between), and at most max+1 bytes are ever read, in case
// it grows after the size was checked.
func ReadFileLimit(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err // *PathError: names the path
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: %w (it is a %s)", path, ErrNotRegular, kind(st.Mode()))
	}
	if st.Size() > max {
		return nil, fmt.Errorf("read %s: %w: %d bytes, at most %d expected", path, ErrTooLarge, st.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("read %s: %w: more than %d bytes", path, ErrTooLarge, max)
	}
	return b, nil
}

// kind names a file type for an error message.
func kind(m fs.FileMode) string {
	switch t := m.Type(); {
	case t&fs.ModeDir != 0:
		return "directory"
	case t&fs.ModeNamedPipe != 0:
		return "FIFO"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeCharDevice != 0:
		return "character device"
	case t&fs.ModeDevice != 0:
		return "device"
	default:
		return "file of type " + t.String()
	}
}

// ExitError carries the exit status a command wants for its error, where a
// script must tell failures apart (meshctl verify: a torn tail from
// tampering).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// FlagError turns what flag.FlagSet.Parse returned into the command's
// error: nil stays nil; -h or --help (flag.ErrHelp, after the flag set has
// printed its usage) stays flag.ErrHelp, which Main exits 0 for without a
// word more; anything else is a usage error (exit 2).
func FlagError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return err
	}
	return fmt.Errorf("%w: %v", ErrUsage, err)
}

// IsHelp says whether args asks for help: "-h", "-help", "--help" or
// "help", as the first argument of a command that has subcommands.
func IsHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// IsVersion says whether arg asks for the version: "version", "-version"
// or "--version".
func IsVersion(arg string) bool {
	switch arg {
	case "version", "-version", "--version", "-V":
		return true
	}
	return false
}

// Main runs run with a context cancelled by SIGINT or SIGTERM and exits:
// 0 on success or when help was asked for (flag.ErrHelp), 2 for a usage error, an *ExitError's own code, 1 for
// anything else, with the error on stderr prefixed by the command's name.
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0) // the usage asked for is already printed
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		if errors.Is(err, ErrUsage) {
			os.Exit(2)
		}
		var ee *ExitError
		if errors.As(err, &ee) {
			os.Exit(ee.Code)
		}
		os.Exit(1)
	}
}
