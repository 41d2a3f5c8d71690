package safety

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/monolock/monolock/conformance/proxy"
	"github.com/monolock/monolock/conformance/wire"
)

const ms = time.Millisecond

func TestMarginIsGrantMinusTold(t *testing.T) {
	for _, c := range []struct {
		name     string
		run      Run
		margin   time.Duration
		measured bool
		unsafe   bool
	}{
		{"told first", Run{HasTold: true, Told: 1600 * ms, HasGranted: true, Granted: 2000 * ms}, 400 * ms, true, false},
		{"granted first", Run{HasTold: true, Told: 2500 * ms, HasGranted: true, Granted: 1800 * ms}, -700 * ms, true, true},
		{"same instant is not unsafe", Run{HasTold: true, Told: ms, HasGranted: true, Granted: ms}, 0, true, false},
		{"granted, never told", Run{HasGranted: true, Granted: 2 * time.Second, Observed: 12 * time.Second}, 0, false, true},
		{"told, never granted", Run{HasTold: true, Told: time.Second, Observed: 10 * time.Second}, 0, false, false},
		{"neither", Run{Observed: 10 * time.Second}, 0, false, false},
		{"failed setup", Run{Err: "boom", HasTold: true, HasGranted: true, Granted: -time.Second}, 0, false, false},
	} {
		m, ok := c.run.Margin()
		if m != c.margin || ok != c.measured {
			t.Errorf("%s: Margin() = %v, %v; want %v, %v", c.name, m, ok, c.margin, c.measured)
		}
		if u := c.run.Unsafe(); u != c.unsafe {
			t.Errorf("%s: Unsafe() = %v, want %v", c.name, u, c.unsafe)
		}
	}
}

func TestSummariseCountsAndOrderStatistics(t *testing.T) {
	runs := []Run{
		{HasTold: true, Told: 1000 * ms, HasGranted: true, Granted: 1400 * ms}, // +400
		{HasTold: true, Told: 1000 * ms, HasGranted: true, Granted: 900 * ms},  // -100, unsafe
		{HasTold: true, Told: 1000 * ms, HasGranted: true, Granted: 1300 * ms}, // +300
		{HasGranted: true, Granted: 2000 * ms, Observed: 12000 * ms},           // unsafe, never told
		{HasTold: true, Told: 1000 * ms, Observed: 10000 * ms},                 // no grant
		{Err: "holder: refused"},
		{Err: "competitor: late"},
	}
	s := Summarise(runs)
	want := Summary{Runs: 7, Measured: 3, Min: -100 * ms, Median: 300 * ms, Max: 400 * ms, Unsafe: 2, NotTold: 1, NoGrant: 1,
		Failed: 2, FirstErr: "holder: refused", UntoldBound: 10000 * ms}
	if s != want {
		t.Fatalf("Summarise =\n %+v\nwant\n %+v", s, want)
	}
	if s.MeetsTarget(2*time.Second, 0.15) {
		t.Error("a cell with unsafe runs meets the target")
	}
}

func TestSummariseMedianOfEvenCountIsMeanOfMiddle(t *testing.T) {
	var runs []Run
	for _, g := range []time.Duration{400, 100, 300, 200} {
		runs = append(runs, Run{HasTold: true, HasGranted: true, Granted: g * ms})
	}
	s := Summarise(runs)
	if s.Median != 250*ms || s.Min != 100*ms || s.Max != 400*ms {
		t.Fatalf("min/median/max = %v/%v/%v", s.Min, s.Median, s.Max)
	}
	if s := Summarise(nil); s.Measured != 0 || s.Median != 0 {
		t.Fatalf("empty summary %+v", s)
	}
}

func TestMeetsTarget(t *testing.T) {
	lease := 2 * time.Second
	ok := Summary{Runs: 5, Measured: 5, Min: 300 * ms}
	if !ok.MeetsTarget(lease, 0.15) {
		t.Error("+300 ms of a 2 s lease should meet 0.15 × lease")
	}
	for name, s := range map[string]Summary{
		"below":        {Runs: 5, Measured: 5, Min: 299 * ms},
		"not measured": {Runs: 5, Measured: 4, Min: time.Second, NoGrant: 1},
		"unsafe":       {Runs: 5, Measured: 5, Min: time.Second, Unsafe: 1},
		"no runs":      {},
	} {
		if s.MeetsTarget(lease, 0.15) {
			t.Errorf("%s: meets the target", name)
		}
	}
}

func TestOutcomeTakesTimesFromTheFault(t *testing.T) {
	f := time.Now()
	r := outcome(f, f.Add(1600*ms), f.Add(2000*ms), f.Add(2100*ms))
	if !r.HasTold || !r.HasGranted || r.Told != 1600*ms || r.Granted != 2000*ms || r.Observed != 2100*ms {
		t.Fatalf("%+v", r)
	}
	r = outcome(f, time.Time{}, f.Add(time.Second), f.Add(5*time.Second))
	if r.HasTold || !r.HasGranted {
		t.Fatalf("%+v", r)
	}
}

func TestInjectSetsTheProxyFaults(t *testing.T) {
	p, err := proxy.Listen("127.0.0.1:9", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, c := range []struct {
		f    Fault
		want proxy.Faults
	}{
		{BlackholeUp, proxy.Faults{Blackhole: [2]bool{wire.Up: true}}},
		{BlackholeDown, proxy.Faults{Blackhole: [2]bool{wire.Down: true}}},
		{BlackholeBoth, proxy.Faults{Blackhole: [2]bool{true, true}}},
		{DelayDown, proxy.Faults{Delay: [2]time.Duration{wire.Down: 3 * time.Second}}},
	} {
		Inject(p, c.f, 3*time.Second)
		if got := p.Faults(); got != c.want {
			t.Errorf("%s: proxy faults %+v, want %+v", c.f, got, c.want)
		}
	}
}

// fakeTrial tells and grants at fixed times after Hold, without a network.
type fakeTrial struct {
	Events
	tellAfter, grantAfter time.Duration // 0: never
	holdErr               error
}

func (f *fakeTrial) Hold(context.Context, string) error {
	if f.holdErr != nil {
		return f.holdErr
	}
	at := func(d time.Duration, do func(time.Time)) {
		if d > 0 {
			time.AfterFunc(d, func() { do(time.Now()) })
		}
	}
	at(f.tellAfter, f.Tell)
	at(f.grantAfter, f.Grant)
	return nil
}
func (f *fakeTrial) Compete(context.Context) error { return nil }
func (f *fakeTrial) Close()                        { f.Halt() }

func fakeRecipe(upstream string, mk func() *fakeTrial) Recipe {
	return Recipe{Name: "Fake Recipe", Upstream: upstream, New: func(string) Trial {
		t := mk()
		t.Events = NewEvents()
		return t
	}}
}

func TestMeasureRecordsEveryRunOfEveryFault(t *testing.T) {
	// lease 40 ms: the fault falls 10-30 ms after Compete, before both events.
	o := Options{Lease: 40 * ms, Runs: 3, Delay: 60 * ms, Window: 200 * ms, Faults: []Fault{BlackholeUp, Reset}}
	cells := Measure(context.Background(), fakeRecipe("127.0.0.1:9", func() *fakeTrial {
		return &fakeTrial{tellAfter: 100 * ms, grantAfter: 180 * ms}
	}), o)
	if len(cells) != 2 {
		t.Fatalf("%d cells", len(cells))
	}
	for _, c := range cells {
		s := Summarise(c.Runs)
		if s.Runs != 3 || s.Measured != 3 || s.Unsafe != 0 || s.Failed != 0 {
			t.Fatalf("%s: %+v", c.Fault, s)
		}
		// The margin does not depend on where the fault fell.
		if s.Min < 60*ms || s.Max > 100*ms {
			t.Errorf("%s: margins %v..%v, want about 80 ms", c.Fault, s.Min, s.Max)
		}
	}
}

func TestMeasureWaitsForALateTellAfterAGrant(t *testing.T) {
	// The fault falls 2-6 ms after Hold, so the window from the fault ends
	// by 306 ms; the grant at 100 ms moves the end to 400 ms, and the tell
	// at 360 ms is measured.
	o := Options{Lease: 8 * ms, Runs: 1, Window: 300 * ms, Faults: []Fault{BlackholeBoth}}
	cells := Measure(context.Background(), fakeRecipe("127.0.0.1:9", func() *fakeTrial {
		return &fakeTrial{tellAfter: 360 * ms, grantAfter: 100 * ms}
	}), o)
	r := cells[0].Runs[0]
	if r.Err != "" || !r.HasTold || !r.HasGranted || !r.Unsafe() {
		t.Fatalf("%+v", r)
	}
	if m, _ := r.Margin(); m > -220*ms || m < -300*ms {
		t.Errorf("margin %v, want about −260 ms", m)
	}
}

func TestMeasureReportsEventsBeforeTheFaultAndSetupErrors(t *testing.T) {
	o := Options{Lease: 40 * ms, Runs: 1, Window: 100 * ms, Faults: []Fault{DelayDown}}
	early := Measure(context.Background(), fakeRecipe("127.0.0.1:9", func() *fakeTrial {
		return &fakeTrial{grantAfter: ms}
	}), o)[0].Runs[0]
	if !strings.Contains(early.Err, "granted before the fault") {
		t.Errorf("early grant: %+v", early)
	}
	failed := Measure(context.Background(), fakeRecipe("127.0.0.1:9", func() *fakeTrial {
		return &fakeTrial{holdErr: context.DeadlineExceeded}
	}), o)[0].Runs[0]
	if !strings.HasPrefix(failed.Err, "holder: ") {
		t.Errorf("failed hold: %+v", failed)
	}
	never := Measure(context.Background(), fakeRecipe("127.0.0.1:9", func() *fakeTrial {
		return &fakeTrial{}
	}), o)[0].Runs[0]
	if never.Err != "" || never.HasTold || never.HasGranted || never.Observed < 100*ms || never.Observed > time.Second {
		t.Errorf("nothing happened: %+v", never)
	}
}
