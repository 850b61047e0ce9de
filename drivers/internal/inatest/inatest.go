// Package inatest holds the test fixtures the INA driver tests share: a
// driver opened on a simulated bus holding one chip, a conversion forced
// and read back, and a consumer kept in lockstep with the chip to show
// that every conversion is handed out once.
package inatest

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/inasim"

	"periph.io/x/conn/v3/i2c"
)

// Open puts a simulated chip of kind at addr on a fresh bus and opens it
// with open; the driver is closed when the test ends.
func Open[D drivers.Sensor](t testing.TB, kind inasim.Kind, addr uint16, open func(i2c.Bus, uint16) (D, error)) (D, *inasim.Chip) {
	t.Helper()
	bus := inasim.NewBus("sim-1")
	chip := bus.Add(kind, addr)
	d, err := open(bus, addr)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, chip
}

// ConvertThenNext makes the chip convert the given inputs and reads the
// conversion back through the driver.
func ConvertThenNext(t testing.TB, d drivers.Sensor, chip *inasim.Chip, shuntNV, busUV int64) drivers.Sample {
	t.Helper()
	chip.SetInputs(shuntNV, busUV)
	if !chip.Convert() {
		t.Fatal("chip is not converting continuously")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := d.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return s
}

// Lockstep converts n times at random moments (from seed) relative to the
// driver's polling, each time only after the consumer got the previous
// conversion, with inputs(i) as the shunt (nV) and bus (µV) inputs; it
// fails the test unless each conversion comes back once, in order, by its
// bus voltage, and unless Next then waits for a conversion that never
// comes.
func Lockstep(t testing.TB, d drivers.Sensor, chip *inasim.Chip, n int, seed uint64, inputs func(i int) (shuntNV, busUV int64)) {
	t.Helper()
	got := make(chan drivers.Sample)
	errc := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		for range n {
			s, err := d.Next(ctx)
			if err != nil {
				errc <- err
				return
			}
			got <- s
		}
	}()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for i := range n {
		time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
		shunt, bus := inputs(i)
		chip.SetInputs(shunt, bus)
		chip.Convert()
		select {
		case s := <-got:
			if s.BusUV != bus {
				t.Fatalf("conversion %d: got bus %d µV, want %d (a repeat or a skip)", i, s.BusUV, bus)
			}
		case err := <-errc:
			t.Fatalf("conversion %d: %v", i, err)
		case <-ctx.Done():
			t.Fatalf("conversion %d never returned", i)
		}
	}
	short, c2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer c2()
	if s, err := d.Next(short); err == nil {
		t.Fatalf("Next returned %+v with no new conversion", s)
	}
}
