package llama

import (
	"fmt"
	"strings"

	"meshd/engine/runner/kernels"
)

// KVType is how a state's cache stores keys or values.
type KVType uint8

const (
	// KVF32 stores float32 rows: exact, 4 bytes a value (the default).
	KVF32 KVType = iota
	// KVQ8_0 stores each row as Q8_0 blocks, quantised as it is written:
	// 1.0625 bytes a value. Attention dequantises keys and values as it
	// reads them, so logits move slightly (see TestKVQ8CloseToF32).
	KVQ8_0
)

// KVTypeNames are the values ParseKVType accepts, as llama-server spells
// its --cache-type-k and --cache-type-v.
var KVTypeNames = []string{"f32", "q8_0"}

func (t KVType) String() string {
	if int(t) < len(KVTypeNames) {
		return KVTypeNames[t]
	}
	return fmt.Sprintf("KVType(%d)", t)
}

// ParseKVType reads a cache type name ("f32", "q8_0").
func ParseKVType(s string) (KVType, error) {
	for i, n := range KVTypeNames {
		if strings.EqualFold(s, n) {
			return KVType(i), nil
		}
	}
	return 0, fmt.Errorf("llama: KV cache type %q is not supported (%s)", s, strings.Join(KVTypeNames, ", "))
}

// StateOptions are a state's choices beyond its size.
type StateOptions struct {
	CacheK, CacheV KVType
}

// bytesPerValue is the cache's size per value of type t.
func (t KVType) bytesPerValue() float64 {
	if t == KVQ8_0 {
		return 34.0 / 32
	}
	return 4
}

// KVBytes is the size of the KV cache of nCtx positions under o.
func (m *Model) KVBytes(nCtx int, o StateOptions) int64 {
	vals := float64(m.Layers) * float64(nCtx) * float64(m.KVHeads*m.HeadDim)
	return int64(vals * (o.CacheK.bytesPerValue() + o.CacheV.bytesPerValue()))
}

// StateBytesWith is StateBytes for a state made with options o.
func (m *Model) StateBytesWith(nCtx int, o StateOptions) int64 {
	return m.StateBytes(nCtx) - m.KVBytes(nCtx, StateOptions{}) + m.KVBytes(nCtx, o)
}

// kvQuant is the part of a state whose keys or values are in Q8_0: the
// quantised rows, and float32 rows that the projections write and rope
// turns before they are stored.
type kvQuant struct {
	o        StateOptions
	rowBytes int      // Q8_0 bytes per cache row
	k, v     [][]byte // per layer, nCtx rows; nil for a float32 side
	kRows    []float32
	vRows    []float32
	store    *kernels.QVec // scratch of one row, for StoreQ8_0
}

// NewStateWith is NewState with a choice of cache storage. A Q8_0 side
// needs the head dimension to be whole 32-value blocks.
func (m *Model) NewStateWith(nCtx int, pool *kernels.Pool, o StateOptions) (*State, error) {
	for _, t := range []KVType{o.CacheK, o.CacheV} {
		if t > KVQ8_0 {
			return nil, fmt.Errorf("llama: KV cache type %d is not supported", t)
		}
		if t == KVQ8_0 && m.HeadDim%32 != 0 {
			return nil, fmt.Errorf("llama: a %s KV cache needs a head dimension in multiples of 32, not %d", t, m.HeadDim)
		}
	}
	s, err := m.newState(nCtx, pool, o)
	if err != nil || o == (StateOptions{}) {
		return s, err
	}
	kvDim := m.KVHeads * m.HeadDim
	kq := &kvQuant{o: o, rowBytes: kvDim / 32 * 34, store: kernels.NewQ8Scratch(kvDim)}
	rows := max(1, min(s.chunk, nCtx))
	if o.CacheK == KVQ8_0 {
		kq.k = make([][]byte, m.Layers)
		for l := range kq.k {
			kq.k[l] = make([]byte, nCtx*kq.rowBytes)
		}
		kq.kRows = make([]float32, rows*kvDim)
	}
	if o.CacheV == KVQ8_0 {
		kq.v = make([][]byte, m.Layers)
		for l := range kq.v {
			kq.v[l] = make([]byte, nCtx*kq.rowBytes)
		}
		kq.vRows = make([]float32, rows*kvDim)
	}
	s.kvq = kq
	return s, nil
}

// CacheTypes are the storage of the state's keys and values.
func (s *State) CacheTypes() StateOptions {
	if s.kvq == nil {
		return StateOptions{}
	}
	return s.kvq.o
}

// kvRows are where the projections write the keys and values of T new
// positions from pos on in layer li: their cache rows when float32,
// scratch rows that storeKV then quantises when Q8_0.
func (s *State) kvRows(li, pos, T int) (k, v []float32) {
	kvDim := s.m.KVHeads * s.m.HeadDim
	lo, hi := pos*kvDim, (pos+T)*kvDim
	if q := s.kvq; q != nil && q.k != nil {
		if len(q.kRows) < T*kvDim {
			q.kRows = make([]float32, T*kvDim)
		}
		k = q.kRows[:T*kvDim]
	} else {
		k = s.k[li][lo:hi]
	}
	if q := s.kvq; q != nil && q.v != nil {
		if len(q.vRows) < T*kvDim {
			q.vRows = make([]float32, T*kvDim)
		}
		v = q.vRows[:T*kvDim]
	} else {
		v = s.v[li][lo:hi]
	}
	return k, v
}

// storeKV stores the rows kvRows gave, once final, for a Q8_0 side.
func (s *State) storeKV(li, pos, T int) {
	q := s.kvq
	if q == nil {
		return
	}
	kvDim := s.m.KVHeads * s.m.HeadDim
	for t := range T {
		at := (pos + t) * q.rowBytes
		if q.k != nil {
			kernels.StoreQ8_0(q.k[li][at:at+q.rowBytes], q.kRows[t*kvDim:(t+1)*kvDim], q.store)
		}
		if q.v != nil {
			kernels.StoreQ8_0(q.v[li][at:at+q.rowBytes], q.vRows[t*kvDim:(t+1)*kvDim], q.store)
		}
	}
}

// putKV writes one position's final key and value rows into the cache:
// the batched decode step's path, whose projections write elsewhere.
func (s *State) putKV(li, pos int, k, v []float32) {
	kvDim := s.m.KVHeads * s.m.HeadDim
	at := pos * kvDim
	q := s.kvq
	if q != nil && q.k != nil {
		kernels.StoreQ8_0(q.k[li][pos*q.rowBytes:(pos+1)*q.rowBytes], k, q.store)
	} else {
		copy(s.k[li][at:at+kvDim], k)
	}
	if q != nil && q.v != nil {
		kernels.StoreQ8_0(q.v[li][pos*q.rowBytes:(pos+1)*q.rowBytes], v, q.store)
	} else {
		copy(s.v[li][at:at+kvDim], v)
	}
}

// attend is query head h's attention over the first n positions of
// layer li's cache, whatever its storage.
func (s *State) attend(li, h int, out, q []float32, n int, scores []float32) {
	m := s.m
	kvDim := m.KVHeads * m.HeadDim
	off := (h / s.attn.group) * m.HeadDim
	kq := s.kvq
	if kq == nil {
		kernels.Attend(out, q, s.k[li], s.v[li], n, kvDim, off, s.attn.scale, scores)
		return
	}
	k := kernels.KVView{Stride: kvDim}
	v := kernels.KVView{Stride: kvDim}
	if kq.k != nil {
		k = kernels.KVView{Q8: kq.k[li], Stride: kq.rowBytes}
	} else {
		k.F32 = s.k[li]
	}
	if kq.v != nil {
		v = kernels.KVView{Q8: kq.v[li], Stride: kq.rowBytes}
	} else {
		v.F32 = s.v[li]
	}
	kernels.AttendKV(out, q, k, v, n, off, s.attn.scale, scores)
}
