package trace

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// countTrace computes the summaries independently of the package: it scans
// the raw text of the data array.
func countTrace(t *testing.T, path string) (n, up, preempt int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	s = s[strings.Index(s, `"data": [`)+len(`"data": [`) : strings.LastIndex(s, "]")]
	prev := false
	for _, f := range strings.Split(s, ", ") {
		v, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		n++
		if v > 0 {
			up++
		} else if prev {
			preempt++
		}
		prev = v > 0
	}
	return n, up, preempt
}

func TestAvailabilityFixtures(t *testing.T) {
	for _, tc := range []struct {
		path           string
		zone, instance string
		tick           time.Duration
		start          string
		n, up, preempt int // known values of the truncated traces
	}{
		{"availability/1-node/aws-02-15-2023/us-east-1a_v100_1.json", "us-east-1a", "v100_1", 195 * time.Second, "2023-02-15", 1200, 102, 18},
		{"availability/1-node/aws-10-26-2022/us-west-2b_k80_1.json", "us-west-2b", "k80_1", 600 * time.Second, "2022-10-26", 1200, 443, 41},
		{"availability/16-node/aws-08-27-2023/us-east-2b_v100_1.json", "us-east-2b", "v100_1", 300 * time.Second, "2023-08-27", 600, 480, 10},
	} {
		t.Run(tc.zone+"_"+tc.instance, func(t *testing.T) {
			path := filepath.Join("testdata", "skypilot", tc.path)
			a, err := ReadAvailability(path)
			if err != nil {
				t.Fatal(err)
			}
			n, up, preempt := countTrace(t, path)
			if n != tc.n || up != tc.up || preempt != tc.preempt {
				t.Fatalf("independent count = %d, %d, %d, want %d, %d, %d", n, up, preempt, tc.n, tc.up, tc.preempt)
			}
			if a.Zone != tc.zone || a.Instance != tc.instance || a.Tick != tc.tick || a.Start.Format(time.DateOnly) != tc.start {
				t.Errorf("got zone %q instance %q tick %v start %v", a.Zone, a.Instance, a.Tick, a.Start)
			}
			if a.Len() != n || a.Duration() != time.Duration(n)*tc.tick {
				t.Errorf("Len %d Duration %v", a.Len(), a.Duration())
			}
			if got, want := a.Fraction(), float64(up)/float64(n); got != want {
				t.Errorf("Fraction = %v, want %v", got, want)
			}
			if got := a.Preemptions(); got != preempt {
				t.Errorf("Preemptions = %d, want %d", got, preempt)
			}
			runs := a.UpRuns()
			total := 0
			for _, r := range runs {
				total += r
			}
			if total != up {
				t.Errorf("up runs sum to %d, want %d", total, up)
			}
			// Every preemption ends a run; a run may also end with the trace.
			if len(runs) != preempt && len(runs) != preempt+1 {
				t.Errorf("%d runs for %d preemptions", len(runs), preempt)
			}
			if got, want := a.MeanUpRun(), time.Duration(float64(up)/float64(len(runs))*float64(tc.tick)); got != want {
				t.Errorf("MeanUpRun = %v, want %v", got, want)
			}
			for i := range a.Count {
				if a.UpAt(time.Duration(i)*a.Tick+a.Tick/2) != a.Up(i) {
					t.Fatalf("UpAt disagrees with Up at tick %d", i)
				}
			}
			if a.UpAt(-time.Second) || a.UpAt(a.Duration()) {
				t.Error("UpAt outside the trace is up")
			}
		})
	}
}

func TestAvailabilityKnownValues(t *testing.T) {
	a, err := ReadAvailability("testdata/skypilot/availability/16-node/aws-08-27-2023/us-east-2b_v100_1.json")
	if err != nil {
		t.Fatal(err)
	}
	// The file begins [0, 0, 0, 3, 3, 3, 3, 7, ...].
	if want := []int{0, 0, 0, 3, 3, 3, 3, 7}; !slicesEqual(a.Count[:8], want) {
		t.Errorf("first counts %v, want %v", a.Count[:8], want)
	}
	if a.Up(2) || !a.Up(3) || a.UpAt(899*time.Second) || !a.UpAt(900*time.Second) {
		t.Error("wrong up/down at the start")
	}
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAvailabilitySummariesSmall(t *testing.T) {
	a := &Availability{Tick: time.Minute, Count: []int{1, 1, 0, 2, 0, 0, 1, 1, 1}}
	if a.Fraction() != 6.0/9 || a.Preemptions() != 2 || a.MeanUpRun() != 2*time.Minute {
		t.Errorf("Fraction %v Preemptions %d MeanUpRun %v", a.Fraction(), a.Preemptions(), a.MeanUpRun())
	}
	empty := &Availability{Tick: time.Minute}
	if empty.Fraction() != 0 || empty.Preemptions() != 0 || empty.MeanUpRun() != 0 {
		t.Error("empty trace")
	}
}

func TestAvailabilityErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"data": [1]}`, "f.json: metadata.gap_seconds: missing"},
		{`{"metadata": {"gap_seconds": 0}, "data": [1]}`, "f.json: metadata.gap_seconds: 0 is not a positive"},
		{`{"metadata": {"gap_seconds": -5}, "data": [1]}`, "metadata.gap_seconds: -5 is not"},
		{`{"metadata": {"gap_seconds": 60}}`, "f.json: data: missing"},
		{"{\"metadata\": {\"gap_seconds\": 60},\n \"data\": [1, 0, -1]}", "f.json:2:17: data[2]: negative count -1"},
		{"{\"metadata\": {\"gap_seconds\": \"60\"},\n \"data\": [1]}", "f.json:1:34: metadata.gap_seconds: cannot use JSON string"},
		{"{\"metadata\": {\"gap_seconds\": 60},\n \"data\": [1, 0.5]}", "f.json:2:17: data: cannot use JSON number 0.5"},
		{"{\"metadata\": {\"gap_seconds\": 60},\n \"data\": [1, }", "f.json:2:14: invalid character"},
		{``, "f.json"},
	} {
		_, err := ParseAvailability("f.json", strings.NewReader(tc.in))
		var pe *ParseError
		if err == nil || !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want containing %q", tc.in, err, tc.want)
		}
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestGCPPrices(t *testing.T) {
	f, err := os.Open("testdata/gcp_spot_price_changes_gpu_a2_a3_g2_g4.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := ParseGCPPrices(f.Name(), f)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 4 {
		t.Errorf("%d series, want 4 (2 regions x spot/on-demand): %v", len(p), p.Keys())
	}
	spot := p[Key{Provider: "gcp", InstanceType: "a2-highgpu-1g", Zone: "us-central1", Market: Spot}]
	od := p[Key{Provider: "gcp", InstanceType: "a2-highgpu-1g", Zone: "us-central1", Market: OnDemand}]
	if spot == nil || od == nil {
		t.Fatalf("missing a2-highgpu-1g us-central1 series: %v", p.Keys())
	}
	if len(spot.Steps) != 10 {
		t.Errorf("%d spot steps, want 10", len(spot.Steps))
	}
	// On-demand never changed: the repeats collapse into one step.
	if len(od.Steps) != 1 || od.Steps[0].USDPerHour != 3.673385 {
		t.Errorf("on-demand steps %v, want one at 3.673385", od.Steps)
	}
	// The SOURCE.md example: 1.102 -> 1.212 -> 1.455 across 2023-05 .. 2023-08.
	for _, tc := range []struct {
		at   string
		want float64
	}{
		{"2023-05-08T06:42:47Z", math.NaN()},
		{"2023-05-08T06:42:48Z", 1.1020155},
		{"2023-06-01T00:00:00Z", 1.1020155},
		{"2023-06-22T03:58:20Z", 1.21219},
		{"2023-08-15T00:00:00Z", 1.45467},
		{"2024-06-01T00:00:00Z", 1.469355},
		{"2030-01-01T00:00:00Z", 1.92802},
	} {
		got := spot.At(mustTime(t, tc.at))
		if got != tc.want && !(math.IsNaN(got) && math.IsNaN(tc.want)) {
			t.Errorf("spot.At(%s) = %v, want %v", tc.at, got, tc.want)
		}
	}
	if got := od.At(mustTime(t, "2025-01-01T00:00:00Z")); got != 3.673385 {
		t.Errorf("on-demand At = %v", got)
	}
}

func TestGCPPricesEmptyOnDemand(t *testing.T) {
	b, err := os.ReadFile("testdata/gcp_spot_price_changes_c2.csv")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseGCPPrices("c2.csv", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	k := Key{Provider: "gcp", InstanceType: "c2-standard-4", Zone: "northamerica-south1"}
	k.Market = Spot
	if got := p[k].At(mustTime(t, "2025-01-01T00:00:00Z")); got != 0.03419112 {
		t.Errorf("spot = %v, want 0.03419112", got)
	}
	k.Market = OnDemand
	if got := p[k].At(mustTime(t, "2025-01-01T00:00:00Z")); !math.IsNaN(got) {
		t.Errorf("on-demand = %v, want NaN (empty in the file)", got)
	}
}

func TestGCPPricesErrors(t *testing.T) {
	const header = "commit_date_utc,generated_unix,machine_type,region,vcpus,ram_gb,accelerator,accelerator_count,hour_ondemand_usd,hour_spot_usd\n"
	for _, tc := range []struct{ in, want string }{
		{"", "g.csv:1: empty file"},
		{"commit_date_utc,machine_type,region,hour_spot_usd\n", "g.csv:1: hour_ondemand_usd: missing column"},
		{header + "2023-05-08T06:42:48+00:00,1,a2,us,12,85,a100,1,3.6,1.1\nyesterday,1,a2,us,12,85,a100,1,3.6,1.1\n", "g.csv:3: commit_date_utc:"},
		{header + "2023-05-08T06:42:48+00:00,1,a2,us,12,85,a100,1,3.6,cheap\n", `g.csv:2: hour_spot_usd: "cheap" is not a number`},
		{header + "2023-05-08T06:42:48+00:00,1,a2,us,12,85,a100,1,-3.6,1\n", `g.csv:2: hour_ondemand_usd: "-3.6" is not a non-negative price`},
		{header + "2023-05-08T06:42:48+00:00,1,,us,12,85,a100,1,3.6,1\n", "g.csv:2: machine_type: empty"},
		{header + "2023-05-08T06:42:48+00:00,1,a2,us\n", "g.csv:2:"},
	} {
		_, err := ParseGCPPrices("g.csv", strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want containing %q", tc.in, err, tc.want)
		}
	}
}

// checkAWS asserts the known values of the AWS fixture, as parsed from either
// format.
func checkAWS(t *testing.T, p Prices) {
	t.Helper()
	if len(p) != 20 {
		t.Errorf("%d series, want 20 (one per row: no key repeats in the fixture)", len(p))
	}
	k := Key{Provider: "aws", InstanceType: "p3.2xlarge", Zone: "use1-az6", Product: "Linux/UNIX", Market: Spot}
	s := p[k]
	if s == nil {
		t.Fatalf("no series %v", k)
	}
	if got := s.At(mustTime(t, "2022-05-31T21:18:00Z")); got != 0.918 {
		t.Errorf("p3.2xlarge use1-az6 Linux at 21:18 = %v, want 0.918", got)
	}
	if got := s.At(mustTime(t, "2022-05-31T21:17:59Z")); !math.IsNaN(got) {
		t.Errorf("before the first step = %v, want NaN", got)
	}
	k.Zone = "use1-az1"
	if got := p[k].At(mustTime(t, "2022-05-31T23:00:00Z")); got != 3.06 {
		t.Errorf("p3.2xlarge use1-az1 Linux = %v, want 3.06", got)
	}
	k = Key{Provider: "aws", InstanceType: "g4dn.4xlarge", Zone: "euw3-az2", Product: "SUSE Linux", Market: Spot}
	if got := p[k].At(mustTime(t, "2022-06-01T00:00:00Z")); got != 0.5914 {
		t.Errorf("g4dn.4xlarge SUSE = %v, want 0.5914", got)
	}
}

func TestAWSPricesJSON(t *testing.T) {
	b, err := os.ReadFile("testdata/aws-describe-spot-price-history.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseAWSPrices("aws.json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	checkAWS(t, p)
}

func TestAWSPricesTSV(t *testing.T) {
	b, err := os.ReadFile("testdata/aws-2022-05.tsv")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseAWSPricesTSV("aws.tsv", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	checkAWS(t, p)
}

func TestAWSPricesSteps(t *testing.T) {
	// describe-spot-price-history lists newest first; steps come out oldest first.
	in := `{"SpotPriceHistory": [
 {"AvailabilityZone": "us-east-1a", "InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX", "SpotPrice": "0.95", "Timestamp": "2022-05-31T22:00:00.000Z"},
 {"AvailabilityZone": "us-east-1a", "InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX", "SpotPrice": "0.918", "Timestamp": "2022-05-31T21:00:00+00:00"}
], "NextToken": ""}`
	p, err := ParseAWSPrices("a.json", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	s := p[Key{Provider: "aws", InstanceType: "p3.2xlarge", Zone: "us-east-1a", Product: "Linux/UNIX", Market: Spot}]
	if s == nil || len(s.Steps) != 2 || s.At(mustTime(t, "2022-05-31T21:30:00Z")) != 0.918 || s.At(mustTime(t, "2022-05-31T22:00:00Z")) != 0.95 {
		t.Fatalf("steps %+v", s)
	}
}

func TestAWSPricesErrors(t *testing.T) {
	const ok = `{"AvailabilityZone": "a", "InstanceType": "p3", "ProductDescription": "Linux/UNIX", "SpotPrice": "1", "Timestamp": "2022-05-31T21:00:00Z"}`
	for _, tc := range []struct{ in, want string }{
		{`{}`, "a.json:1:1: SpotPriceHistory: missing"},
		{`[]`, "a.json:1:1: want a JSON object"},
		{`{"SpotPriceHistory": {}}`, "a.json:1:22: SpotPriceHistory: want an array"},
		{"{\"SpotPriceHistory\": [" + ok + ",\n " + strings.Replace(ok, `"1"`, `"x"`, 1) + "]}", `a.json:2:2: SpotPriceHistory[1].SpotPrice: "x" is not a number`},
		{"{\"SpotPriceHistory\": [\n" + strings.Replace(ok, `"p3"`, `""`, 1) + "]}", "a.json:2:1: SpotPriceHistory[0].InstanceType: missing or empty"},
		{"{\"SpotPriceHistory\": [\n" + strings.Replace(ok, `"2022-05-31T21:00:00Z"`, `"May 31"`, 1) + "]}", "a.json:2:1: SpotPriceHistory[0].Timestamp:"},
		{"{\"SpotPriceHistory\": [\n" + strings.Replace(ok, `"1"`, `1`, 1) + "]}", "SpotPriceHistory[].SpotPrice: cannot use JSON number"},
		{`{"SpotPriceHistory": [` + ok, "a.json:1:" + strconv.Itoa(23+len(ok)) + ": unexpected EOF"},
		{`{"SpotPriceHistory": []} {}`, "data after the JSON object"},
	} {
		_, err := ParseAWSPrices("a.json", strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want containing %q", tc.in, err, tc.want)
		}
	}
	_, err := ParseAWSPricesTSV("a.tsv", strings.NewReader("use1-az1\tp3\tLinux/UNIX\t1\t2022-05-31T21:00:00Z\nuse1-az1\tp3\tLinux/UNIX\t-1\t2022-05-31T21:00:00Z\n"))
	if err == nil || !strings.Contains(err.Error(), `a.tsv:2: spot_price: "-1" is not a non-negative price`) {
		t.Errorf("TSV error %v", err)
	}
}

// TestSharedTraces reads every full availability trace in /work/shared/data.
func TestSharedTraces(t *testing.T) {
	root := "/work/shared/data/skypilot-spot-traces"
	if _, err := os.Stat(root); err != nil {
		t.Skipf("skipping: the shared traces are absent (%v)", err)
	}
	var paths []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".json") {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no traces found")
	}
	dateDir := regexp.MustCompile(`^(aws|gcp)-\d\d-\d\d-\d{4}$`)
	for _, p := range paths {
		a, err := ReadAvailability(p)
		if err != nil {
			t.Fatal(err)
		}
		f := a.Fraction()
		if !(f >= 0 && f <= 1) {
			t.Errorf("%s: fraction %v outside [0, 1]", p, f)
		}
		if !dateDir.MatchString(a.Set) || a.Start.IsZero() {
			t.Errorf("%s: set %q start %v", p, a.Set, a.Start)
		}
		rel, _ := filepath.Rel(root, p)
		t.Logf("%-62s tick %4v  %5d ticks (%5.1f d)  up %5.1f%%  preemptions %4d  mean up run %v",
			rel, a.Tick, a.Len(), a.Duration().Hours()/24, 100*f, a.Preemptions(), a.MeanUpRun().Round(time.Minute))
	}
}
