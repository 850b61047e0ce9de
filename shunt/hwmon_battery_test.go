package shunt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/hwmon"
	"meshd/wire"
)

// The sysfs battery: the real hwmon driver reads a fake sysfs tree whose
// attribute files a simulated chip rewrites as its conversions complete,
// each value the exact mean of a known load over the chip's window, on a
// simulated clock where every clock read costs time (so the latch moment
// of a read is uncertain) and pacing sleeps overrun at random. The
// windows' figures are then checked against the load's exact integral.

// simLoad is a power trace, piecewise constant on a fixed step, with
// prefix sums for exact integrals.
type simLoad struct {
	step int64     // ns
	cum  []float64 // nJ through the end of each step
}

func (l *simLoad) at(t int64) float64 { // nJ from 0 to t
	i := t / l.step
	if i <= 0 {
		return float64(t) * l.cum[0] / float64(l.step)
	}
	if i >= int64(len(l.cum)) {
		return l.cum[len(l.cum)-1]
	}
	prev := l.cum[i-1]
	return prev + (l.cum[i]-prev)*float64(t-i*l.step)/float64(l.step)
}

func (l *simLoad) energy(a, b int64) float64 { return l.at(b) - l.at(a) }

// hwmonLoad builds a seeded load of the named shape, in watts, with a
// 1 W, 1 ms ripple on top (a busy rail never holds a register value still),
// except "quiet": 12 W exactly, every reading of this channel identical.
func hwmonLoad(shape string, length time.Duration, rng *rand.Rand) *simLoad {
	const step = 100 * time.Microsecond
	n := int(length / step)
	w := make([]float64, n)
	level := func(from, to int, v float64) {
		for i := from; i < min(to, n); i++ {
			w[i] = v
		}
	}
	ms := int(time.Millisecond / step)
	switch shape {
	case "steady", "quiet":
		level(0, n, 12)
	case "bursts":
		for i := 0; i < n; {
			idle := (5 + rng.IntN(500)) * ms
			level(i, i+idle, 3)
			i += idle
			burst := (5 + rng.IntN(300)) * ms
			level(i, i+burst, 15)
			i += burst
		}
	case "ramps":
		v := 2.0
		for i := 0; i < n; {
			to, d := 2+16*rng.Float64(), (50+rng.IntN(450))*ms
			for k := 0; k < d && i+k < n; k++ {
				w[i+k] = v + (to-v)*float64(k)/float64(d)
			}
			v, i = to, i+d
		}
	case "idle-gaps":
		for i := 0; i < n; {
			idle := (500 + rng.IntN(3000)) * ms
			level(i, i+idle, 2)
			i += idle
			serve := (500 + rng.IntN(1500)) * ms
			level(i, i+serve, 10)
			i += serve
		}
	case "square-1khz":
		for i := 0; i < n; i++ {
			w[i] = 4
			if (i/(ms/2))%2 == 1 {
				w[i] = 16
			}
		}
	default:
		panic("unknown load " + shape)
	}
	for i := 0; i < n && shape != "quiet"; i += ms {
		r := rng.NormFloat64()
		for k := i; k < min(i+ms, n); k++ {
			w[k] = max(w[k]+r, 0)
		}
	}
	l := &simLoad{step: int64(step), cum: make([]float64, n)}
	var c float64
	for i, v := range w {
		c += v * 1e9 * float64(step) / 1e9 // W × ns = nJ
		l.cum[i] = c
	}
	return l
}

// simChip is an INA3221 channel (or an INA226) converting continuously:
// window k ends at phase + k·tau, and its attribute files hold the newest
// completed window's mean, scaled as the kernel scales the registers.
type simChip struct {
	dir         string
	ina226      bool
	tau, phase  int64
	bus         float64 // V
	gain, vosUV float64 // the chip's own errors, within its datasheet
	shuntUOhm   float64
	load        *simLoad
	written     int64
	// siblings draws the INA3221's other two channels (a Jetson's CPU/GPU
	// and SOC rails, which never sit still): the chip converts them in
	// the same cycle, so they change at the same completions.
	siblings *rand.Rand
}

func (c *simChip) refresh(t int64) error {
	k := (t - c.phase) / c.tau
	if t < c.phase {
		k = -1
	}
	if k == c.written {
		return nil
	}
	c.written = k
	end := c.phase + k*c.tau
	p := c.load.energy(end-c.tau, end) / float64(c.tau) // W
	amps := p/c.bus*(1+c.gain) + c.vosUV*1e-6/(c.shuntUOhm*1e-6)
	var files map[string]string
	if c.ina226 {
		reg := math.Round(amps * c.shuntUOhm * 1e-6 / 2.5e-6) // shunt register = current register
		busReg := math.Round(c.bus / 1.25e-3)
		powReg := math.Floor(reg * busReg / 20000)
		files = map[string]string{
			"in0_input": strconv.FormatInt(int64(math.Round(reg*2.5e-3)), 10), "in1_input": strconv.FormatInt(int64(busReg*1.25), 10),
			"curr1_input": strconv.FormatInt(int64(math.Round(reg*1.25)), 10), "power1_input": strconv.FormatInt(int64(powReg*31250), 10),
		}
	} else {
		reg := math.Round(amps * c.shuntUOhm * 1e-6 / 40e-6)
		files = map[string]string{
			"in1_input": strconv.FormatInt(int64(math.Round(c.bus/8e-3))*8, 10), "in4_input": strconv.FormatInt(int64(reg*40), 10),
			"curr1_input": strconv.FormatInt(int64(math.Round(reg*40000/c.shuntUOhm)), 10),
		}
		for ch := 2; ch <= 3; ch++ {
			files[fmt.Sprintf("in%d_input", ch)] = strconv.Itoa(8 * (2383 + c.siblings.IntN(3)))
			files[fmt.Sprintf("in%d_input", ch+3)] = strconv.Itoa(40 * (20 + c.siblings.IntN(60)))
		}
	}
	for f, v := range files {
		if err := os.WriteFile(filepath.Join(c.dir, f), []byte(v+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// simClock is the battery's clock: every Now costs a seeded 20–80 µs (the
// attribute reads between two stamps take time, and the chip's files are
// refreshed at a random moment inside that time, so the latch is anywhere
// within the read), and every Sleep overruns by up to 200 µs, now and then
// by 5–30 ms (a scheduling hiccup: a window may pass unread).
type simClock struct {
	t       int64
	rng     *rand.Rand
	chip    *simChip
	err     error
	hiccups bool
}

func (c *simClock) Now() time.Time {
	now := c.t
	cost := int64(20_000 + c.rng.IntN(60_000))
	if err := c.chip.refresh(now + c.rng.Int64N(cost)); err != nil && c.err == nil {
		c.err = err
	}
	c.t += cost
	return time.Unix(0, 0).Add(time.Duration(now))
}

func (c *simClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	over := c.rng.Int64N(200_000)
	if c.hiccups && c.rng.IntN(100) == 0 {
		over = int64(5*time.Millisecond) + c.rng.Int64N(int64(25*time.Millisecond))
	}
	c.t += max(d.Nanoseconds(), 0) + over
	return nil
}

type sysfsSetup struct {
	name    string
	chip    string  // "ina3221" or "ina226"
	skew    float64 // the chip's clock against nominal
	load    string
	hiccups bool // 1 % of sleeps overrun by 5–30 ms
}

// runSysfs drives the real hwmon driver over the simulated tree for the
// run's length, recording into a Series, and returns it with the load.
func runSysfs(t *testing.T, su sysfsSetup, seed uint64, length time.Duration) (*Series, *simLoad, int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	root := filepath.Join(t.TempDir(), "hwmon")
	if err := os.CopyFS(root, os.DirFS("../drivers/hwmon/testdata/hwmon")); err != nil {
		t.Fatal(err)
	}
	load := hwmonLoad(su.load, length, rng)
	chip := &simChip{load: load, written: math.MinInt64, gain: (rng.Float64()*2 - 1) * 0.004,
		siblings: rand.New(rand.NewPCG(seed, 0x51b))}
	want := "hwmon1/ina3221:1(VDD_IN)"
	if su.chip == "ina226" {
		chip.ina226, chip.dir, chip.bus, chip.shuntUOhm = true, filepath.Join(root, "hwmon2"), 11.98, 2000
		chip.tau = int64(float64(35*time.Millisecond) * (1 + su.skew))
		chip.vosUV = (rng.Float64()*2 - 1) * 8
		want = "hwmon2/ina226:1"
	} else {
		chip.dir, chip.bus, chip.shuntUOhm = filepath.Join(root, "hwmon1"), 19.072, 5000
		chip.tau = int64(float64(6600*time.Microsecond) * (1 + su.skew))
		chip.vosUV = (rng.Float64()*2 - 1) * 60
	}
	chip.phase = rng.Int64N(chip.tau)
	clk := &simClock{rng: rng, chip: chip, hiccups: su.hiccups}
	rails, err := hwmon.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	var rail hwmon.Rail
	for _, r := range rails {
		if r.String() == want {
			rail = r
		}
	}
	s, err := hwmon.Open(rail, hwmon.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	epoch := time.Unix(0, 0)
	series, err := NewSeries(s.Name(), s.Info(), Config{Capacity: int(length/s.Info().Period) + 4096,
		Now: func() time.Time { return epoch.Add(time.Duration(clk.t)) }, Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var stale int
	for clk.t < int64(length) {
		smp, err := s.Next(ctx)
		if errors.Is(err, drivers.ErrStale) {
			stale++
		}
		series.RecordAt(smp, err, epoch.Add(time.Duration(clk.t)))
	}
	if clk.err != nil {
		t.Fatal(clk.err)
	}
	return series, load, stale
}

// TestHwmonAveragedBattery is the must-hold battery for hwmon averaging
// meters: for each setup, 1 000 seeded windows of 50 ms to 3 s over an
// engine-shaped load; the bound must contain the exact energy in ≥ 99 %
// of them, no window may be HwShunt, and a steady 1 s serve on the
// Jetson's INA3221 rail must come out within 10 %.
func TestHwmonAveragedBattery(t *testing.T) {
	if testing.Short() {
		t.Skip("battery")
	}
	setups := []sysfsSetup{
		{"ina3221 steady 12 W", "ina3221", 0, "steady", false},
		{"ina3221 steady, clock +9 %", "ina3221", 0.09, "steady", false},
		{"ina3221 steady, clock −9 %", "ina3221", -0.09, "steady", false},
		{"ina3221 quiet 12 W, no ripple", "ina3221", 0.02, "quiet", false},
		{"ina3221 bursts 3/15 W", "ina3221", 0.03, "bursts", false},
		{"ina3221 ramps 2–18 W", "ina3221", -0.04, "ramps", false},
		{"ina3221 idle gaps", "ina3221", 0.05, "idle-gaps", false},
		{"ina3221 1 kHz square", "ina3221", -0.02, "square-1khz", false},
		{"ina3221 bursts, sched hiccups", "ina3221", 0.03, "bursts", true},
		{"ina226 kernel 35 ms, bursts", "ina226", 0.06, "bursts", false},
	}
	const runLen = 30 * time.Second
	const windows = 1000
	var table []string
	for i, su := range setups {
		series, load, stale := runSysfs(t, su, uint64(1000+i), runLen)
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		var holds, hw, n int
		var ratios, stats []float64
		var steady1s []float64
		for w := 0; w < windows; w++ {
			d := time.Duration(math.Exp(math.Log(50e6) + rng.Float64()*(math.Log(3e9)-math.Log(50e6))))
			t0 := time.Second + time.Duration(rng.Int64N(int64(runLen-2*time.Second-d)))
			rep, err := series.Energy(time.Unix(0, 0).Add(t0), time.Unix(0, 0).Add(t0+d))
			if err != nil {
				t.Fatalf("%s: window %v+%v: %v", su.name, t0, d, err)
			}
			if rep.Model != ModelAveraged {
				t.Fatalf("%s: window %v+%v was not integrated under the averaged model", su.name, t0, d)
			}
			n++
			truth := load.energy(int64(t0), int64(t0+d)) / 1e3 // µJ
			got, bound := float64(rep.Reading.EnergyUJ), float64(rep.Reading.Metering.ErrorUJ)
			if math.Abs(got-truth) <= bound {
				holds++
			}
			if rep.Reading.Provenance == wire.HwShunt {
				hw++
			}
			ratios = append(ratios, bound/max(got, 1))
			if st := rep.Reading.Metering.StatUJ; st != nil {
				stats = append(stats, float64(*st)/max(got, 1))
			}
			if d > 900*time.Millisecond && d < 1100*time.Millisecond {
				steady1s = append(steady1s, bound/max(got, 1))
			}
		}
		pct := 100 * float64(holds) / float64(n)
		table = append(table, fmt.Sprintf("%-30s %7d %9.2f%% %14.2f%% %12.2f%% %13.3f%% %8d %6d", su.name, n, pct, 100*medianF(ratios), 100*medianF(steady1s), 100*medianF(stats), hw, stale))
		if pct < 99 {
			t.Errorf("%s: bound holds in %.2f%% of windows, want ≥ 99%%", su.name, pct)
		}
		if hw != 0 {
			t.Errorf("%s: %d HwShunt windows from a point meter", su.name, hw)
		}
		if (su.load == "steady" || su.load == "quiet") && su.chip == "ina3221" && !su.hiccups {
			if len(steady1s) == 0 {
				t.Fatalf("%s: no window near 1 s", su.name)
			}
			// The goal: a steady ~1 s serve's bound within 10 % of its
			// figure. The datasheet's offsets and one quantisation step
			// are 4.4 % of 12 W at 19 V and the two edges ~1.6 %; the
			// rest is the reading-to-reading change. The quiet rail holds
			// every value of its channel identical: only the chip's other
			// channels prove it converts, and no window may pay for a
			// stale report.
			m := medianF(steady1s)
			t.Logf("%s: steady ~1 s serves: median bound %.2f%%, largest %.2f%% of the figure over %d windows", su.name, 100*m, 100*sortedMax(steady1s), len(steady1s))
			if m > 0.10 {
				t.Errorf("%s: a steady 1 s serve's bound is %.2f%% of the figure, want ≤ 10%%", su.name, 100*m)
			}
			if stale != 0 {
				t.Errorf("%s: %d stale reports from a converting chip", su.name, stale)
			}
		}
	}
	t.Logf("hwmon averaged-reading battery (real driver, fake sysfs, %v runs; bounds and stat as %% of the figure):\n%-30s %7s %10s %15s %13s %14s %8s %6s\n%s", runLen,
		"setup", "windows", "holds", "median bound", "~1 s bound", "median stat", "HwShunt", "stale", joinLines(table))
}

func medianF(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func sortedMax(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func joinLines(v []string) string {
	out := ""
	for i, s := range v {
		if i > 0 {
			out += "\n"
		}
		out += s
	}
	return out
}
