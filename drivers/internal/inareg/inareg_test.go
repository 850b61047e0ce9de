package inareg

import (
	"math"
	"testing"
)

func TestMulDiv(t *testing.T) {
	tests := []struct {
		a, b, d, want int64
	}{
		{10000, 5_120_000_000_000, 5_120_000, 10_000_000_000},           // 10 A on the INA226 example
		{65535 * 20, 40_960_000_000_000, 40_960_000, 1_310_700_000_000}, // product beyond 64 bits
		{-5000, 5_120_000_000_000, 5_120_000, -5_000_000_000},           // sign kept
		{3, 1, 2, 2}, {-3, 1, 2, -2}, {5, 1, 4, 1}, // half away from zero
		{math.MaxInt64, math.MaxInt64, 1, math.MaxInt64}, // saturates
		{math.MinInt64 + 1, 4, 2, math.MinInt64 + 1},     // saturates negative
		{math.MaxInt64, 2, 1, math.MaxInt64},             // quotient beyond int64
	}
	for _, tt := range tests {
		if got := MulDiv(tt.a, tt.b, tt.d); got != tt.want {
			t.Errorf("MulDiv(%d, %d, %d) = %d, want %d", tt.a, tt.b, tt.d, got, tt.want)
		}
	}
}
