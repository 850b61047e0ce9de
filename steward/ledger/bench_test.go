package ledger

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
)

// BenchmarkOpenSnapshotVsReplay builds one history of 1M serves (hold and
// settle, fsync off) and opens it two ways, interleaved, 3 times each:
// replaying the whole uncompacted file, and from the snapshot Compact made
// of it (anchored past every receipt). Open is given no charges in either
// case, so only the ledger's own work is measured. It reports the median of
// each (replay-ms, snapshot-ms), their ratio (replay/snapshot), both file
// sizes, and the heap in use after each open (replay-heap-MB,
// snapshot-heap-MB). ns/op is the whole run and means nothing on its own.
func BenchmarkOpenSnapshotVsReplay(b *testing.B) {
	const serves, reps = 1_000_000, 3
	dir := b.TempDir()
	full, snap := filepath.Join(dir, "full"), filepath.Join(dir, "snap")
	l, _, err := Open(full, nil, Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	g := gid(1)
	for i := 0; i < serves; i++ {
		h, err := l.Hold(ctx, g, 1<<62, 100)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Settle(h, 60); err != nil {
			b.Fatal(err)
		}
	}
	want := balance(b, l, g)
	l.Close()
	if err := copyFile(full, snap); err != nil {
		b.Fatal(err)
	}
	l, _, err = Open(snap, nil, Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	if ok, err := l.Compact(func() (Anchor, error) { return Anchor{Count: serves}, nil }); !ok || err != nil {
		b.Fatal(ok, err)
	}
	l.Close()

	openOnce := func(path string) (time.Duration, uint64) {
		start := time.Now()
		l, _, err := Open(path, nil, Options{NoSync: true})
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if got := balance(b, l, g); got != want || len(l.holds) != 0 {
			b.Fatalf("%s opened to %+v with %d holds, want %+v and none", path, got, len(l.holds), want)
		}
		heap := heapInUse()
		l.Close()
		return d, heap
	}
	var replay, fromSnap []time.Duration
	var replayHeap, snapHeap uint64
	b.ResetTimer()
	for range b.N {
		for range reps {
			d, h := openOnce(full)
			replay, replayHeap = append(replay, d), max(replayHeap, h)
			d, h = openOnce(snap)
			fromSnap, snapHeap = append(fromSnap, d), max(snapHeap, h)
		}
	}
	b.StopTimer()
	r, s := median(replay), median(fromSnap)
	b.ReportMetric(float64(r.Microseconds())/1e3, "replay-ms")
	b.ReportMetric(float64(s.Microseconds())/1e3, "snapshot-ms")
	b.ReportMetric(float64(r)/float64(s), "replay/snapshot")
	b.ReportMetric(float64(fileSize(b, full))/1e6, "replay-file-MB")
	b.ReportMetric(float64(fileSize(b, snap)), "snapshot-file-B")
	b.ReportMetric(float64(replayHeap)/1e6, "replay-heap-MB")
	b.ReportMetric(float64(snapHeap)/1e6, "snapshot-heap-MB")
}

func median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

func fileSize(b *testing.B, path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// heapInUse is the live heap after a collection, with the ledger just
// opened still referenced by the caller.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
