package loadgen

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const body = `{"inputs":[{"name":"pixels","shape":[1,64],"datatype":"FP32","data":[0]}]}`

func TestRunCountsEachOutcome(t *testing.T) {
	// The server answers by the order it receives requests: 429, 500, a
	// 200 it holds past the objective, and a 200 at once.
	const objective = 300 * time.Millisecond
	var n atomic.Int64
	var bad atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/v2/models/digits/versions/3/infer" || string(b) != body || r.Header.Get("Content-Type") != "application/json" {
			bad.Store(r.Method + " " + r.URL.Path + " " + string(b))
		}
		switch n.Add(1) % 4 {
		case 1:
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":"refused"}`)
		case 2:
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":"boom"}`)
		case 3:
			time.Sleep(2 * objective) // a slow model: this answer is late
			io.WriteString(w, `{"outputs":[]}`)
		default:
			io.WriteString(w, `{"outputs":[]}`)
		}
	}))
	defer srv.Close()
	arr := make(Arrivals, 8)
	for i := range arr {
		arr[i] = time.Duration(i) * time.Millisecond
	}
	rep, err := Run(context.Background(), Config{URL: srv.URL, Model: "digits", Version: "3", Body: []byte(body),
		Arrivals: arr, Objective: objective})
	if err != nil {
		t.Fatal(err)
	}
	if b := bad.Load(); b != nil {
		t.Fatalf("the server got %v", b)
	}
	for _, o := range []Outcome{OnTime, Late, Refused, Failed} {
		if got := rep.Count(o); got != 2 {
			t.Errorf("%v: %d, want 2", o, got)
		}
	}
	var out strings.Builder
	rep.Print(&out)
	for _, want := range []string{"on time           2", "refused           2", `error x2: 500 {"error":"boom"}`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunIsOpenLoop(t *testing.T) {
	// The server answers nothing until it has all the requests: a load
	// generator that waited for answers before sending would never finish.
	const total = 20
	var got sync.WaitGroup
	got.Add(total)
	all := make(chan struct{})
	go func() { got.Wait(); close(all) }()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Done()
		<-all
		io.WriteString(w, `{"outputs":[]}`)
	}))
	defer srv.Close()
	arr := make(Arrivals, total)
	for i := range arr {
		arr[i] = time.Duration(i) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{URL: srv.URL, Model: "m", Body: []byte(body), Arrivals: arr, Objective: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Count(OnTime) != total {
		t.Errorf("%d on time, want %d", rep.Count(OnTime), total)
	}
}

func TestRunRefusesABadConfig(t *testing.T) {
	if _, err := Run(context.Background(), Config{URL: "http://x", Model: "m"}); err == nil || !strings.Contains(err.Error(), "objective") {
		t.Errorf("no objective: %v", err)
	}
}

func TestRunDoesNotWaitPastMaxInFlight(t *testing.T) {
	release := make(chan struct{})
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		<-release
		io.WriteString(w, `{"outputs":[]}`)
	}))
	defer srv.Close()
	// Two may wait; the third, due while the server holds them, is not
	// sent; the server answers once the fourth is due.
	clock := &stepClock{}
	clock.gate = func(i int) {
		switch i {
		case 2:
			for got.Load() < 2 {
				runtime.Gosched()
			}
		case 3:
			close(release)
		}
	}
	rep, err := Run(context.Background(), Config{URL: srv.URL, Model: "m", Body: []byte(body),
		Arrivals: Arrivals{0, 0, 0, 0}, Objective: time.Minute, MaxInFlight: 2, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Samples
	if s[0].Outcome != OnTime || s[1].Outcome != OnTime || s[2].Outcome != Failed || !strings.Contains(s[2].Err, "not sent") {
		t.Errorf("outcomes %+v, want two on time and the third not sent", s)
	}
}

// stepClock is the real time, except that before the i-th request it
// calls gate(i).
type stepClock struct {
	n    int
	gate func(i int)
}

func (c *stepClock) Now() time.Time { return time.Now() }
func (c *stepClock) SleepUntil(ctx context.Context, t time.Time) error {
	c.gate(c.n)
	c.n++
	return ctx.Err()
}

func TestCommand(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.WriteString(w, `{"outputs":[]}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	bodyFile := dir + "/req.json"
	if err := os.WriteFile(bodyFile, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	err := Command(context.Background(), []string{"-url", srv.URL, "-model", "m", "-body", bodyFile, "-rate", "2000", "-n", "30", "-objective", "1m"}, &out, &errOut)
	if err != nil {
		t.Fatalf("%v (%s)", err, errOut.String())
	}
	if n.Load() != 30 || !strings.Contains(out.String(), "on time          30") {
		t.Errorf("server got %d; table:\n%s", n.Load(), out.String())
	}
	err = Command(context.Background(), []string{"-model", "m", "-body", bodyFile, "-arrivals", "uniform"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "want poisson or azure=FILE") {
		t.Errorf("bad -arrivals: %v", err)
	}
}
