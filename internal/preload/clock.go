//go:build linux && amd64

package preload

import (
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// rdtsc reads the time-stamp counter (tsc_amd64.s).
func rdtsc() uint64

// tscUsable reports whether the TSC ticks at a constant rate in every state
// and is the kernel's clocksource (so it is synchronised across CPUs).
func tscUsable() bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	flags := ""
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "flags") {
			flags = " " + l + " "
			break
		}
	}
	if !strings.Contains(flags, " constant_tsc ") || !strings.Contains(flags, " nonstop_tsc ") {
		return false
	}
	cs, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && strings.TrimSpace(string(cs)) == "tsc"
}

// A clock converts the interposer's timestamps to CLOCK_MONOTONIC ns. In TSC
// mode it is a line fitted through samples of (TSC, CLOCK_MONOTONIC), taken
// a second apart: the slope from the first sample, the offset from the
// latest, so that the error stays under a microsecond however long the
// session runs. Used by the pump goroutine only.
type clock struct {
	mode      uint32 // clockTSC or clockMonotonic
	t0        uint64 // first sample
	n0        int64
	ta        uint64 // latest sample
	na        int64
	nsPerTick float64
	sampled   time.Time
	slack     uint64 // watermark slack, in timestamp units
}

const watermarkSlack = 100 * time.Microsecond

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// sample reads both clocks together: the pair of five with the tightest TSC
// bracket around the monotonic read.
func sample() (uint64, int64) {
	var tsc uint64
	var ns int64
	best := ^uint64(0)
	for i := 0; i < 5; i++ {
		a := rdtsc()
		n := monoNow()
		b := rdtsc()
		if b-a < best {
			best, tsc, ns = b-a, a+(b-a)/2, n
		}
	}
	return tsc, ns
}

func newClock(useTSC bool) *clock {
	if !useTSC {
		return &clock{mode: clockMonotonic, slack: uint64(watermarkSlack)}
	}
	c := &clock{mode: clockTSC}
	c.t0, c.n0 = sample()
	time.Sleep(10 * time.Millisecond)
	c.ta, c.na = sample()
	c.nsPerTick = float64(c.na-c.n0) / float64(c.ta-c.t0)
	c.sampled = time.Now()
	c.slack = uint64(float64(watermarkSlack) / c.nsPerTick)
	return c
}

// now is the current time in the interposer's units.
func (c *clock) now() uint64 {
	if c.mode == clockMonotonic {
		return uint64(monoNow())
	}
	return rdtsc()
}

// refine takes a new sample once a second.
func (c *clock) refine() {
	if c.mode == clockMonotonic || time.Since(c.sampled) < time.Second {
		return
	}
	c.ta, c.na = sample()
	c.nsPerTick = float64(c.na-c.n0) / float64(c.ta-c.t0)
	c.sampled = time.Now()
}

// ns converts a timestamp.
func (c *clock) ns(ts uint64) int64 {
	if c.mode == clockMonotonic {
		return int64(ts)
	}
	return c.na + int64(float64(int64(ts-c.ta))*c.nsPerTick)
}
