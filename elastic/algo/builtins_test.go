package algo

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestNamesAreTheRegistrySorted(t *testing.T) {
	names := Names()
	want := []string{"factorization-machines", "kmeans", "linear-learner", "median", "moments", "pca"}
	if !slices.Equal(names, want) {
		t.Fatalf("Names() = %v, want %v", names, want)
	}
	for _, n := range names {
		b := Builtins[n]
		if b.Name != n || b.Summary == "" || b.Make == nil {
			t.Errorf("Builtins[%q] = {Name: %q, Summary: %q, Make nil: %v}: want its own name, a summary and a Make", n, b.Name, b.Summary, b.Make == nil)
		}
		if b.Serves != (n != "median" && n != "moments") {
			t.Errorf("%s: Serves = %v", n, b.Serves)
		}
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		name    string
		algo    string
		flags   []string
		hp      map[string]any
		want    map[string]float64
		ignored []string
		wantErr string // a substring of the error; "" for none
	}{
		{name: "flags win over hyperparameters", algo: "kmeans", flags: []string{"k=4"},
			hp:   map[string]any{"k": 9.0, "seed": json.Number("3"), "batch": 5.0, "alpha": "x"},
			want: map[string]float64{"k": 4, "seed": 3}, ignored: []string{"alpha", "batch"}},
		{name: "booleans are 0 and 1", algo: "factorization-machines", hp: map[string]any{"sgd": true, "seed": false},
			want: map[string]float64{"sgd": 1, "seed": 0}},
		{name: "features for all", algo: "median", flags: []string{"features=8"}, want: map[string]float64{"features": 8}},
		{name: "not name=number", algo: "pca", flags: []string{"k"}, wantErr: `--param "k": want name=number`},
		{name: "not a number", algo: "pca", flags: []string{"k=ten"}, wantErr: `--param "k=ten": want name=number`},
		{name: "no name", algo: "pca", flags: []string{"=3"}, wantErr: `--param "=3": want name=number`},
		{name: "unknown names the parameters", algo: "pca", flags: []string{"kk=3"},
			wantErr: `--param kk=3: pca has no parameter "kk" (its parameters: k, features)`},
		{name: "an algorithm without parameters", algo: "moments", flags: []string{"k=3"},
			wantErr: `(its parameters: none but features)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ps, ignored, err := Builtins[c.algo].Parse(c.flags, c.hp)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Parse: error %v, want one with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) != len(c.want) {
				t.Errorf("params %v, want %v", ps, c.want)
			}
			for k, v := range c.want {
				if got, ok := ps[k]; !ok || got != v {
					t.Errorf("params[%q] = %v (%v), want %v", k, got, ok, v)
				}
			}
			if !slices.Equal(ignored, c.ignored) {
				t.Errorf("ignored %v, want %v", ignored, c.ignored)
			}
		})
	}
}

func TestMakeRefusesBadParameters(t *testing.T) {
	for _, c := range []struct {
		algo    string
		params  map[string]float64
		wantErr string
	}{
		{"kmeans", map[string]float64{}, "k: the number of clusters is required"},
		{"pca", map[string]float64{"k": 0}, "k: the number of components is required"},
		{"linear-learner", map[string]float64{"classes": -1}, "classes: want 0 (regression), 2 (binary) or the number of classes (got -1)"},
		{"factorization-machines", map[string]float64{"classes": 3}, "classes: want 0 (regression) or 2 (binary) (got 3)"},
	} {
		_, _, err := Builtins[c.algo].Make(c.params, 4)
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s.Make(%v): error %v, want one with %q", c.algo, c.params, err, c.wantErr)
		}
	}
	for _, n := range Names() {
		if _, save, err := Builtins[n].Make(map[string]float64{"k": 2, "classes": 2}, 4); err != nil || save == nil {
			t.Errorf("%s.Make: %v (saver nil: %v), want an algorithm", n, err, save == nil)
		}
	}
}

func TestGangFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, c := range []struct {
		name    string
		getenv  func(string) string
		want    Gang
		wantErr string
	}{
		{name: "alone", getenv: env(), want: Gang{WorldSize: 1}},
		{name: "a world of one", getenv: env("WORLD_SIZE", "1", "RANK", "7"), want: Gang{WorldSize: 1}},
		{name: "rank 1 of 3", getenv: env("WORLD_SIZE", "3", "RANK", "1", "MASTER_ADDR", "h0", "MASTER_PORT", "29500"),
			want: Gang{Rank: 1, WorldSize: 3, MasterAddr: "h0", MasterPort: 29500}},
		{name: "not a number", getenv: env("WORLD_SIZE", "two"), want: Gang{WorldSize: 1}, wantErr: `WORLD_SIZE="two": want a number`},
		{name: "rank out of range", getenv: env("WORLD_SIZE", "2", "RANK", "2", "MASTER_ADDR", "h0", "MASTER_PORT", "1"), wantErr: "RANK=2: want 0 to 1 (WORLD_SIZE=2)"},
		{name: "no master", getenv: env("WORLD_SIZE", "2", "RANK", "0", "MASTER_PORT", "1"), wantErr: "MASTER_ADDR is empty"},
		{name: "bad port", getenv: env("WORLD_SIZE", "2", "RANK", "0", "MASTER_ADDR", "h0", "MASTER_PORT", "70000"), wantErr: "MASTER_PORT=70000: want a TCP port"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := GangFromEnv(c.getenv)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("GangFromEnv: error %v, want one with %q", err, c.wantErr)
				}
				return
			}
			if err != nil || g != c.want {
				t.Fatalf("GangFromEnv = %+v, %v; want %+v", g, err, c.want)
			}
		})
	}
}

func TestGangEndpoints(t *testing.T) {
	for _, c := range []struct {
		name                string
		gang                Gang
		shards              int
		token               string
		wantListen, wantURL string
		wantN               int
		wantErr             string
	}{
		{name: "one machine stays on loopback", gang: Gang{WorldSize: 3, MasterAddr: "127.0.0.1", MasterPort: 29500}, shards: 1,
			wantListen: "127.0.0.1:29500", wantURL: "http://127.0.0.1:29500", wantN: 12},
		{name: "more shards asked", gang: Gang{WorldSize: 2, MasterAddr: "localhost", MasterPort: 7}, shards: 20,
			wantListen: "localhost:7", wantURL: "http://localhost:7", wantN: 20},
		{name: "across machines with a token", gang: Gang{WorldSize: 2, MasterAddr: "node1", MasterPort: 29500}, shards: 1, token: "s",
			wantListen: ":29500", wantURL: "http://node1:29500", wantN: 8},
		{name: "across machines without a token", gang: Gang{WorldSize: 2, MasterAddr: "node1", MasterPort: 29500}, shards: 1,
			wantErr: "a gang across machines (MASTER_ADDR node1) needs a token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			listen, url, n, err := c.gang.Endpoints(c.shards, c.token)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Endpoints: error %v, want one with %q", err, c.wantErr)
				}
				return
			}
			if err != nil || listen != c.wantListen || url != c.wantURL || n != c.wantN {
				t.Fatalf("Endpoints = %q, %q, %d, %v; want %q, %q, %d", listen, url, n, err, c.wantListen, c.wantURL, c.wantN)
			}
		})
	}
}
