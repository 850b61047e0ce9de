package serialmeter_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"meshd/drivers/drivertest"
	"meshd/drivers/internal/metersim"
	"meshd/drivers/internal/ptypair"
	"meshd/drivers/serialmeter"
)

// Example polls a simulated UM25C on a pseudo-terminal. Each reading is
// an instant, placed within the serial transaction that carried it.
func Example() {
	pty, err := ptypair.Open()
	if err != nil {
		log.Fatal(err)
	}
	defer pty.Close()
	// 5.021 V, 1.2345 A (the UM25C reports mV and 0.1 mA).
	go (&metersim.UM{Reply: func(int) []byte { return metersim.UMFrame(0x09C9, 5021, 12345, 6198, 31) }}).Serve(pty.Master)

	ctx := context.Background()
	clk := drivertest.NewClock(drivertest.Epoch, true)
	m, err := serialmeter.OpenUM(ctx, serialmeter.UMConfig{Path: pty.Slave, PollInterval: 500 * time.Millisecond, Clock: clk})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	info := m.Info()
	fmt.Println(m.Model(), info.Kind, "full scale", info.Accuracy.FullScale(0))
	for range 2 {
		s, err := m.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("at", s.End.Sub(drivertest.Epoch), s.Bus, "×", s.Current, "=", s.Power, "±", s.Uncertainty)
	}
	// Output:
	// UM25C point full scale 120W
	// at 0s 5.021V × 1.234A = 6.198W ± 136.458333ms
	// at 500ms 5.021V × 1.234A = 6.198W ± 136.458333ms
}
