package kernels

// Exported one-row products for the types beyond Q8_0 and Q4_0; each
// runs the kernel the matrix products use, over the blocks both the row
// and the activation hold.

// DotQ4_1 is the dot product of one Q4_1 row with v's 32-value form.
func DotQ4_1(row []byte, v *QVec) float32 {
	nb := min(len(v.D), len(v.Q)/32, len(row)/20)
	return dotQ4_1Generic(row, nb, v)
}

// DotQ5_0 is the dot product of one Q5_0 row with v's 32-value form.
func DotQ5_0(row []byte, v *QVec) float32 {
	nb := min(len(v.D), len(v.Q)/32, len(row)/22)
	return dotQ5_0Generic(row, nb, v)
}

// DotQ5_1 is the dot product of one Q5_1 row with v's 32-value form.
func DotQ5_1(row []byte, v *QVec) float32 {
	nb := min(len(v.D), len(v.Q)/32, len(row)/24)
	return dotQ5_1Generic(row, nb, v)
}

// DotQ4_K is the dot product of one Q4_K row with v's 256-value form.
func DotQ4_K(row []byte, v *QVec) float32 { return dotKRow(dotQ4KRows, 144, row, v) }

// DotQ5_K is the dot product of one Q5_K row with v's 256-value form.
func DotQ5_K(row []byte, v *QVec) float32 { return dotKRow(dotQ5KRows, 176, row, v) }

// DotQ6_K is the dot product of one Q6_K row with v's 256-value form.
func DotQ6_K(row []byte, v *QVec) float32 { return dotKRow(dotQ6KRows, 210, row, v) }

func dotKRow(rows func(w []byte, rowBytes, nb int, v *QVec, out []float32), bb int, row []byte, v *QVec) float32 {
	nb := min(len(v.DK), len(v.QK)/qkK, len(v.BS)/16, len(row)/bb)
	if nb == 0 {
		return 0
	}
	var out [1]float32
	rows(row, nb*bb, nb, v, out[:])
	return out[0]
}
