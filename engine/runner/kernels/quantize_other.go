//go:build !amd64 || purego

package kernels

func (v *QVec) quantize32(x []float32) { v.quantize32Generic(x, 0) }

func (v *QVec) quantizeK(x []float32) { v.quantizeKGeneric(x, 0) }
