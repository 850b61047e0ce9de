package corpus

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// BenchmarkSearch100k is an exact top-10 search over 100 000 chunks of a
// 384-dimensional embedding (e5-small's): it reports the index's vector
// memory, the time per query, and that time against a plain pass over
// the same bytes in the same run (summing them, one goroutine each), which
// is the floor any exact search pays: median of interleaved repetitions.
func BenchmarkSearch100k(b *testing.B) {
	const n, dim, reps = 100_000, 384, 7
	r := rand.New(rand.NewPCG(1, 2))
	c := &Corpus{Dim: dim, Chunks: make([]Chunk, n), vectors: make([]float32, n*dim)}
	for i := range c.vectors {
		c.vectors[i] = float32(r.NormFloat64())
	}
	for i := range n {
		copy(c.vectors[i*dim:], normalise(c.vectors[i*dim:(i+1)*dim]))
	}
	q := make([]float32, dim)
	for i := range q {
		q[i] = float32(r.NormFloat64())
	}
	var search, scan []float64
	var sink float32
	b.ResetTimer()
	for range reps {
		t := time.Now()
		if _, err := c.Search(q, 10); err != nil {
			b.Fatal(err)
		}
		search = append(search, time.Since(t).Seconds())
		t = time.Now()
		var s float32
		for _, v := range c.vectors {
			s += v
		}
		sink += s
		scan = append(scan, time.Since(t).Seconds())
	}
	b.StopTimer()
	med := func(x []float64) float64 { sort.Float64s(x); return x[len(x)/2] }
	ms, base := med(search)*1e3, med(scan)*1e3
	b.ReportMetric(ms, "ms/query")
	b.ReportMetric(base, "ms/scan-baseline")
	b.ReportMetric(ms/base, "query/scan")
	b.ReportMetric(float64(c.VectorBytes())/(1<<20), "MiB-vectors")
	if sink == 42 {
		b.Log(sink)
	}
}
