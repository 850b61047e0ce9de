// Package framelog owns the one on-disk framing the steward's stores share
// (the receipt log's segments, its checkpoints and the grant ledger): a
// magic, then length- and checksum-framed records whose header checksums
// itself; the one rule that tells a torn tail from corruption; group commit;
// and the exclusive lock that keeps a second writer out.
//
// # Frame
//
//	u32 BE body length | u32 BE CRC-32C(body) | u32 BE CRC-32C(the 8 bytes before) | body
//
// Because the header carries its own checksum, a damaged length is
// recognised as damage and never mistaken for a frame that runs past the end
// of the file.
//
// # Torn tails
//
// A write that a power cut interrupted was never acknowledged (an append is
// acknowledged only after fsync), and it can only be the last thing in the
// file. Exactly these endings are torn and are cut on open:
//
//   - fewer bytes than a header remain;
//   - a valid header whose body runs past the end of the file;
//   - the header is zero from a 512-byte-aligned offset inside it (a
//     header cut at a sector boundary), with nothing but zeros after it;
//   - a valid header whose body fails its checksum and is zero from a
//     512-byte-aligned file offset inside it (or throughout), with nothing
//     but zeros after it to the end of the file (a write whose last sectors
//     never reached the disk).
//
// # Zero padding
//
// Every byte from a frame boundary to the end of the file being zero is
// not a torn write but padding (Tail.Zero): a writer that preallocates
// (Writer.Preallocate) keeps zeros ahead of its frames, so that an fsync
// overwrites blocks the file already has instead of growing it, and a file
// the kernel extended but whose data never reached the disk looks the
// same. Zeros hold no frame, so nothing is lost either way; a writer
// overwrites them and cuts what is left when it closes.
//
// Anything else that does not check out is corruption: it refuses to open,
// names the frame's index and byte offset, and leaves the file untouched.
package framelog

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// HeaderSize is the size of a frame header.
const HeaderSize = 12

// sector is the granularity at which a torn write can leave zeros.
const sector = 512

var table = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C the frames use.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, table) }

// ErrCorrupt is wrapped by every *CorruptError.
var ErrCorrupt = errors.New("corrupt")

// CorruptError names the first frame that is not a torn tail and does not
// check out.
type CorruptError struct {
	Index  uint64 // 0-based position of the frame among the file's frames
	Offset int64  // byte offset of the frame's header (0: the magic)
	Err    error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("frame %d at byte offset %d: %v", e.Index, e.Offset, e.Err)
}

func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// Format describes one kind of framed file.
type Format struct {
	Magic   string // written at offset 0
	MaxBody int    // a longer body is corruption
}

// AppendFrame appends the frame of body to dst.
func AppendFrame(dst, body []byte) []byte {
	var h [HeaderSize]byte
	binary.BigEndian.PutUint32(h[0:], uint32(len(body)))
	binary.BigEndian.PutUint32(h[4:], Checksum(body))
	binary.BigEndian.PutUint32(h[8:], Checksum(h[:8]))
	return append(append(dst, h[:]...), body...)
}

// Tail is what a scan found after the last valid frame.
type Tail struct {
	// End is the offset just past the last valid frame (or the magic): the
	// length the file must be cut to.
	End int64
	// Torn is the number of bytes after End, all of them a torn write.
	Torn int64
	// Zero is the number of bytes after End, all of them zero padding
	// from a frame boundary (see the package doc). At most one of Torn
	// and Zero is set.
	Zero int64
}

// Cut is t with its zero padding counted as torn, for a file that does not
// preallocate: Resume then cuts the zeros instead of keeping them.
func (t Tail) Cut() Tail { return Tail{End: t.End, Torn: t.Torn + t.Zero} }

// Visit sees one valid frame. body is freshly allocated and may be kept.
type Visit func(index uint64, off int64, body []byte) error

// Scan reads a whole file from r, which must be at offset 0: the magic, then
// every frame, calling visit for each valid one in order. An empty file, or
// one holding only a prefix of the magic (or zeros), is a torn file with
// End 0. A visit error stops the scan and is returned as it is.
func (f Format) Scan(ctx context.Context, r io.Reader, visit Visit) (Tail, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic := make([]byte, len(f.Magic))
	n, err := io.ReadFull(br, magic)
	switch {
	case err == io.EOF:
		return Tail{}, nil
	case err == io.ErrUnexpectedEOF:
		if string(magic[:n]) == f.Magic[:n] || allZero(magic[:n]) {
			return Tail{End: 0, Torn: int64(n)}, nil
		}
		return Tail{}, &CorruptError{Err: fmt.Errorf("not a %s file (bad magic)", f.Magic)}
	case err != nil:
		return Tail{}, err
	case string(magic) != f.Magic:
		if allZero(magic) {
			rest, zero, err := zeroRest(br)
			if err != nil {
				return Tail{}, err
			}
			if zero {
				return Tail{End: 0, Torn: int64(n) + rest}, nil
			}
		}
		return Tail{}, &CorruptError{Err: fmt.Errorf("not a %s file (bad magic)", f.Magic)}
	}
	return f.scan(ctx, br, int64(len(f.Magic)), 0, visit)
}

// ScanFrom reads frames from r, which must be positioned at byte offset off
// of the file, just past a valid frame (or the magic); index is the index
// of the first frame read.
func (f Format) ScanFrom(ctx context.Context, r io.Reader, off int64, index uint64, visit Visit) (Tail, error) {
	return f.scan(ctx, bufio.NewReaderSize(r, 1<<16), off, index, visit)
}

func (f Format) scan(ctx context.Context, br *bufio.Reader, off int64, index uint64, visit Visit) (Tail, error) {
	var hdr [HeaderSize]byte
	for ; ; index++ {
		if index%256 == 0 {
			if err := ctx.Err(); err != nil {
				return Tail{}, fmt.Errorf("scan stopped at frame %d: %w", index, err)
			}
		}
		n, err := io.ReadFull(br, hdr[:])
		switch {
		case err == io.EOF:
			return Tail{End: off}, nil
		case err == io.ErrUnexpectedEOF:
			if allZero(hdr[:n]) {
				return Tail{End: off, Zero: int64(n)}, nil
			}
			return Tail{End: off, Torn: int64(n)}, nil
		case err != nil:
			return Tail{}, err
		}
		if binary.BigEndian.Uint32(hdr[8:]) != Checksum(hdr[:8]) {
			if zeroFromSector(hdr[:], off) {
				rest, zero, err := zeroRest(br)
				if err != nil {
					return Tail{}, err
				}
				switch {
				case zero && allZero(hdr[:]):
					return Tail{End: off, Zero: HeaderSize + rest}, nil
				case zero:
					return Tail{End: off, Torn: HeaderSize + rest}, nil
				}
			}
			return Tail{}, &CorruptError{Index: index, Offset: off, Err: errors.New("frame header checksum mismatch (damaged length or checksum)")}
		}
		length := binary.BigEndian.Uint32(hdr[0:])
		if length == 0 || int64(length) > int64(f.MaxBody) {
			return Tail{}, &CorruptError{Index: index, Offset: off, Err: fmt.Errorf("frame length %d out of range 1..%d", length, f.MaxBody)}
		}
		body := make([]byte, length)
		m, err := io.ReadFull(br, body)
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return Tail{End: off, Torn: HeaderSize + int64(m)}, nil
		case err != nil:
			return Tail{}, err
		}
		if Checksum(body) != binary.BigEndian.Uint32(hdr[4:]) {
			if zeroFromSector(body, off+HeaderSize) {
				rest, zero, err := zeroRest(br)
				if err != nil {
					return Tail{}, err
				}
				if zero {
					return Tail{End: off, Torn: HeaderSize + int64(length) + rest}, nil
				}
			}
			return Tail{}, &CorruptError{Index: index, Offset: off, Err: errors.New("frame body checksum mismatch")}
		}
		if err := visit(index, off, body); err != nil {
			return Tail{}, err
		}
		off += HeaderSize + int64(length)
	}
}

// zeroFromSector reports whether body, which starts at file offset start,
// is zero from a sector boundary inside it to its end (or zero throughout):
// the shape of a write whose last sectors never reached the disk.
func zeroFromSector(body []byte, start int64) bool {
	last := len(body) - 1
	for last >= 0 && body[last] == 0 {
		last--
	}
	if last < 0 {
		return true
	}
	boundary := (start + int64(last) + sector) / sector * sector // first boundary after the last non-zero byte
	return boundary < start+int64(len(body))
}

// zeroRest consumes the rest of br, reporting its length and whether it is
// all zero.
func zeroRest(br *bufio.Reader) (int64, bool, error) {
	var n int64
	zero := true
	buf := make([]byte, 1<<15)
	for {
		m, err := br.Read(buf)
		n += int64(m)
		if zero && !allZero(buf[:m]) {
			zero = false
		}
		if err == io.EOF {
			return n, zero, nil
		}
		if err != nil {
			return 0, false, err
		}
		if !zero {
			return n, false, nil
		}
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
