package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cursor is what the cursor file holds: the next sequence to publish, for
// which steward (a log re-created under a new key starts over).
type cursor struct {
	Steward string `json:"steward"`
	Next    uint64 `json:"next"`
}

// maxCursorFile bounds what is read of a cursor file: a valid one is
// two slots.
const maxCursorFile = 4096

// The cursor file holds two slots of cursorSlot bytes, each a line
//
//	meshd fleet cursor 1 gen=G steward=S next=N crc=C
//
// padded with zeros, C being the CRC-32 (IEEE, 8 hex digits) of the line
// before " crc=". A write overwrites the slot of the older generation in
// place (one pwrite on a file kept open): a replacement by rename (a
// temporary file created, written, renamed) cost the publisher a few
// microseconds per receipt, most of it creating the file. A slot torn by
// a crash fails its CRC and the other, one write older, is used: an older
// cursor only republishes receipts the stream and the verifier recognise
// as duplicates. The slots lie in different 512-byte sectors so that one
// torn sector cannot take both.
const (
	cursorSlot  = 512
	cursorMagic = "meshd fleet cursor 1 "
)

// readCursor reads the cursor file at path; a missing file is a cursor at
// zero. A file in the earlier JSON format ({"steward":S,"next":N}) is
// read too.
func readCursor(path string) (cursor, error) {
	c, _, err := readCursorGen(path)
	return c, err
}

// readCursorGen is readCursor with the generation of the slot read (0 for
// a missing file or the JSON format).
func readCursorGen(path string) (cursor, uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cursor{}, 0, nil
	}
	if err != nil {
		return cursor{}, 0, fmt.Errorf("read fleet cursor: %w", err)
	}
	if len(b) > maxCursorFile {
		return cursor{}, 0, fmt.Errorf("fleet cursor %s: %d bytes, not a cursor", path, len(b))
	}
	if len(b) > 0 && b[0] == '{' {
		var c cursor
		if err := json.Unmarshal(b, &c); err != nil {
			return cursor{}, 0, fmt.Errorf("fleet cursor %s: %w", path, err)
		}
		return c, 0, nil
	}
	var (
		best    cursor
		bestGen uint64
		errs    []error
	)
	for i := range 2 {
		lo := min(i*cursorSlot, len(b))
		c, gen, err := parseCursorSlot(b[lo:min(lo+cursorSlot, len(b))])
		if err != nil {
			errs = append(errs, fmt.Errorf("slot %d: %w", i, err))
			continue
		}
		if gen > bestGen {
			best, bestGen = c, gen
		}
	}
	if bestGen == 0 {
		return cursor{}, 0, fmt.Errorf("fleet cursor %s: no valid slot: %w", path, errors.Join(errs...))
	}
	return best, bestGen, nil
}

// parseCursorSlot reads one slot.
func parseCursorSlot(slot []byte) (cursor, uint64, error) {
	line, _, ok := bytes.Cut(slot, []byte{'\n'})
	if !ok {
		return cursor{}, 0, errors.New("no line")
	}
	body, sum, ok := bytes.Cut(line, []byte(" crc="))
	if !ok {
		return cursor{}, 0, fmt.Errorf("no checksum in %q", line)
	}
	if want, err := strconv.ParseUint(string(sum), 16, 32); err != nil || len(sum) != 8 || uint32(want) != crc32.ChecksumIEEE(body) {
		return cursor{}, 0, fmt.Errorf("checksum mismatch in %q", line)
	}
	rest, ok := bytes.CutPrefix(body, []byte(cursorMagic))
	if !ok {
		return cursor{}, 0, fmt.Errorf("not a cursor slot: %q", line)
	}
	f := strings.Split(string(rest), " ")
	if len(f) != 3 {
		return cursor{}, 0, fmt.Errorf("want gen, steward and next in %q", line)
	}
	var c cursor
	g, gok := strings.CutPrefix(f[0], "gen=")
	st, sok := strings.CutPrefix(f[1], "steward=")
	n, nok := strings.CutPrefix(f[2], "next=")
	if !gok || !sok || !nok {
		return cursor{}, 0, fmt.Errorf("want gen, steward and next in %q", line)
	}
	gen, err := strconv.ParseUint(g, 10, 64)
	if err != nil || gen == 0 {
		return cursor{}, 0, fmt.Errorf("bad generation in %q", line)
	}
	if c.Next, err = strconv.ParseUint(n, 10, 64); err != nil {
		return cursor{}, 0, fmt.Errorf("bad next in %q", line)
	}
	c.Steward = st
	return c, gen, nil
}

// cursorFile is an open cursor file written slot by slot.
type cursorFile struct {
	f    *os.File
	path string
	gen  uint64 // of the newest slot written
	buf  [cursorSlot]byte
}

// openCursor opens the cursor file at path for writing. A file not in
// the two-slot format (missing, in the JSON format, damaged) is first
// replaced, by a rename, by one holding c; created says so.
func openCursor(path string, c cursor) (cf *cursorFile, created bool, err error) {
	cf = &cursorFile{path: path}
	if _, gen, err := readCursorGen(path); err == nil && gen > 0 {
		cf.gen = gen
	} else {
		var file [2 * cursorSlot]byte
		cf.gen = 1
		cf.fill(c)
		copy(file[cf.gen%2*cursorSlot:], cf.buf[:])
		if err := writeFile(path, file[:], 0o600, false); err != nil {
			return nil, false, fmt.Errorf("fleet cursor: %w", err)
		}
		created = true
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, false, fmt.Errorf("fleet cursor: %w", err)
	}
	cf.f = f
	return cf, created, nil
}

// fill formats c as generation cf.gen's slot into cf.buf.
func (cf *cursorFile) fill(c cursor) {
	b := append(cf.buf[:0], cursorMagic...)
	b = append(b, "gen="...)
	b = strconv.AppendUint(b, cf.gen, 10)
	b = append(b, " steward="...)
	b = append(b, c.Steward...)
	b = append(b, " next="...)
	b = strconv.AppendUint(b, c.Next, 10)
	sum := crc32.ChecksumIEEE(b)
	b = append(b, " crc="...)
	for shift := 28; shift >= 0; shift -= 4 {
		b = append(b, "0123456789abcdef"[sum>>shift&0xf])
	}
	b = append(b, '\n')
	clear(cf.buf[len(b):])
}

// write records c in the slot of the older generation.
func (cf *cursorFile) write(c cursor) error {
	cf.gen++
	cf.fill(c)
	if _, err := cf.f.WriteAt(cf.buf[:], int64(cf.gen%2)*cursorSlot); err != nil {
		return fmt.Errorf("write %s: %w", cf.path, err)
	}
	return nil
}

func (cf *cursorFile) close() error { return cf.f.Close() }

// writeCursor records c in the cursor file at path, without fsync: a
// cursor lost or older after a crash only makes the publisher republish
// receipts the stream already holds, which the server and the verifier
// recognise as duplicates, while two fsyncs per published batch would be
// paid on every node's serve path.
func writeCursor(path string, c cursor) error {
	cf, created, err := openCursor(path, c)
	if err != nil {
		return err
	}
	if !created {
		err = cf.write(c)
	}
	if cerr := cf.close(); err == nil {
		err = cerr
	}
	return err
}

// writeFileAtomic writes data to a temporary file beside path, makes it
// durable, renames it over path and makes the rename durable.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	return writeFile(path, data, perm, true)
}

// writeFile writes data to a temporary file beside path and renames it
// over path; with durable, both the file and the rename are synced.
func writeFile(path string, data []byte, perm os.FileMode, durable bool) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Chmod(perm)
	}
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if !durable {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	defer d.Close()
	if err = d.Sync(); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	return nil
}
