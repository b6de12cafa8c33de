package spec

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestFormatValue(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{0.001, "0.001"},
		{1e-05, "1e-05"},
		{32.0, "32"},
		{float32(0.1), "0.1"},
		{1e21, "1e+21"},
		{-2.5, "-2.5"},
		{int64(32), "32"},
		{7, "7"},
		{uint64(math.MaxUint64), "18446744073709551615"},
		{true, "true"},
		{false, "false"},
		{"relu", "relu"},
		{nil, ""},
		{json.Number("3"), "3"},
	}
	for _, tt := range tests {
		if got := FormatValue(tt.in); got != tt.want {
			t.Errorf("FormatValue(%#v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFillArgv(t *testing.T) {
	hp := map[string]any{"lr": 0.001, "hidden": 32.0, "act": "relu", "log": true, "n": int64(5)}
	tests := []struct {
		name    string
		argv    []string
		want    []string
		wantErr string // exact error text; "" for success
	}{
		{name: "plain", argv: []string{"python3", "train.py"}, want: []string{"python3", "train.py"}},
		{
			name: "placeholders",
			argv: []string{"--lr=${lr}", "--hidden", "${hidden}", "${act}-${n}-${log}"},
			want: []string{"--lr=0.001", "--hidden", "32", "relu-5-true"},
		},
		{name: "escape", argv: []string{"$${lr} costs $5 and $$ and ${lr}"}, want: []string{"${lr} costs $5 and $$ and 0.001"}},
		{name: "unknown", argv: []string{"ok", "--x=${x}"}, wantErr: `argument 1 ("--x=${x}"): no hyperparameter "x" for ${x}`},
		{name: "unterminated", argv: []string{"${lr"}, wantErr: `argument 0 ("${lr"): ` + errUnterminated.Error()},
		{name: "empty", argv: []string{"${}"}, wantErr: `argument 0 ("${}"): ` + errEmptyName.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FillArgv(tt.argv, hp)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FillArgv (-want +got):\n%s", diff)
			}
		})
	}
	argv := []string{"${lr}"}
	if _, err := FillArgv(argv, hp); err != nil || argv[0] != "${lr}" {
		t.Errorf("FillArgv changed its input: %q (err %v)", argv, err)
	}
}

func TestFillString(t *testing.T) {
	got, err := FillString("LR=${lr}", map[string]any{"lr": 1e-5})
	if err != nil || got != "LR=1e-05" {
		t.Errorf("FillString = %q, %v; want LR=1e-05", got, err)
	}
}

func TestSplitCommand(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "python3 train.py --lr ${lr}", want: []string{"python3", "train.py", "--lr", "${lr}"}},
		{in: "  a\tb\n c  ", want: []string{"a", "b", "c"}},
		{in: `a 'b c' "d e" f\ g`, want: []string{"a", "b c", "d e", "f g"}},
		{in: `'' ""`, want: []string{"", ""}},
		{in: `"a \"q\" \$x \n"`, want: []string{`a "q" $x \n`}},
		{in: `'it''s'`, want: []string{"its"}},
		{in: "a\\\nb", want: []string{"ab"}},
		{in: `x"y z"w`, want: []string{"xy zw"}},
		{in: "", want: nil},
		{in: `'open`, wantErr: true},
		{in: `"open`, wantErr: true},
		{in: `trailing\`, wantErr: true},
	}
	for _, tt := range tests {
		got, err := splitCommand(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("splitCommand(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("splitCommand(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestParseMemory(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: "512", want: 512},
		{in: "512MiB", want: 512},
		{in: "512Mi", want: 512},
		{in: "2GiB", want: 2048},
		{in: "2gib", want: 2048},
		{in: "1.5 GiB", want: 1536},
		{in: "1G", want: 954},
		{in: "1GB", want: 954},
		{in: "500M", want: 477},
		{in: "500MB", want: 477},
		{in: "1024KiB", want: 1},
		{in: "1B", want: 1},
		{in: "0", want: 0},
		{in: "0.5", want: 1},
		{in: "1TiB", want: 1 << 20},
		{in: "2XB", wantErr: `unknown memory unit "XB" (use KiB, MiB, GiB, TiB, KB, MB, GB, TB, or no unit for MiB)`},
		{in: "-5MiB", wantErr: "memory must be >= 0 (got -5MiB)"},
		{in: "lots", wantErr: `expected a size like 512MiB, 2GiB, 1G or a number of MiB (got "lots")`},
		{in: "1.2.3G", wantErr: `expected a size like 512MiB, 2GiB, 1G or a number of MiB (got "1.2.3G")`},
		{in: "2000TiB", wantErr: "memory 2000TiB is too large (at most 1 PiB)"},
	}
	for _, tt := range tests {
		got, err := ParseMemory(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("ParseMemory(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: "90s", want: 90 * time.Second},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "120", want: 2 * time.Minute},
		{in: "250ms", want: 250 * time.Millisecond},
		{in: "-5s", want: -5 * time.Second}, // sign is Parse's business
		{in: "1.5", wantErr: true},
		{in: "soon", wantErr: true},
		{in: "99999999999999", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseDuration(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if got.D() != tt.want {
			t.Errorf("ParseDuration(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(struct{ T Duration }{Duration(90 * time.Second)})
	if err != nil || string(b) != `{"T":"1m30s"}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var back struct{ T Duration }
	if err := json.Unmarshal(b, &back); err != nil || back.T.D() != 90*time.Second {
		t.Errorf("Unmarshal = %v, %v", back.T, err)
	}
	if err := json.Unmarshal([]byte(`{"T":"x"}`), &back); err == nil {
		t.Error("Unmarshal of a bad duration succeeded")
	}
}

func TestGridValues(t *testing.T) {
	tests := []struct {
		name string
		h    Hyperparameter
		want []any
	}{
		{name: "const", h: Hyperparameter{Type: HPConst, Value: int64(3)}, want: []any{int64(3)}},
		{name: "categorical", h: Hyperparameter{Type: HPCategorical, Values: []any{"a", true, 1.5}}, want: []any{"a", true, 1.5}},
		{name: "float default 5", h: Hyperparameter{Type: HPFloat, Min: 0, Max: 1}, want: []any{0.0, 0.25, 0.5, 0.75, 1.0}},
		{name: "float count", h: Hyperparameter{Type: HPFloat, Min: -1, Max: 1, Count: 3}, want: []any{-1.0, 0.0, 1.0}},
		{name: "float log", h: Hyperparameter{Type: HPFloat, Min: 0.001, Max: 0.1, Log: true, Count: 3}, want: []any{0.001, 0.01, 0.1}},
		{name: "int all", h: Hyperparameter{Type: HPInt, Min: 1, Max: 4}, want: []any{int64(1), int64(2), int64(3), int64(4)}},
		{name: "int all within count", h: Hyperparameter{Type: HPInt, Min: 1, Max: 3, Count: 10}, want: []any{int64(1), int64(2), int64(3)}},
		{name: "int count", h: Hyperparameter{Type: HPInt, Min: 0, Max: 100, Count: 3}, want: []any{int64(0), int64(50), int64(100)}},
		{name: "int log dedup", h: Hyperparameter{Type: HPInt, Min: 1, Max: 1000, Log: true, Count: 4}, want: []any{int64(1), int64(10), int64(100), int64(1000)}},
		{name: "int log spaced", h: Hyperparameter{Type: HPInt, Min: 1, Max: 4, Log: true, Count: 3}, want: []any{int64(1), int64(2), int64(4)}},
		{name: "int log collisions", h: Hyperparameter{Type: HPInt, Min: 1, Max: 10, Log: true, Count: 8}, want: []any{int64(1), int64(2), int64(3), int64(4), int64(5), int64(7), int64(10)}},
		{name: "int log rounding", h: Hyperparameter{Type: HPInt, Min: 1, Max: 200, Log: true, Count: 8}, want: []any{int64(1), int64(2), int64(5), int64(10), int64(21), int64(44), int64(94), int64(200)}},
		{name: "int wide no count", h: Hyperparameter{Type: HPInt, Min: 1, Max: 1001}, want: []any{int64(1), int64(251), int64(501), int64(751), int64(1001)}},
		{name: "int near 2^53", h: Hyperparameter{Type: HPInt, Min: 1<<53 - 2, Max: 1 << 53}, want: []any{int64(1<<53 - 2), int64(1<<53 - 1), int64(1 << 53)}},
		{name: "unknown type", h: Hyperparameter{Type: "x"}, want: nil},
	}
	approx := cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(a)) })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.h.GridValues(), approx); diff != "" {
				t.Errorf("GridValues (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGridSize(t *testing.T) {
	e := &Experiment{Hyperparameters: map[string]*Hyperparameter{}}
	if got := e.GridSize(); got != 1 {
		t.Errorf("empty GridSize = %d, want 1", got)
	}
	e.Hyperparameters["a"] = &Hyperparameter{Type: HPInt, Min: 1, Max: 4}
	e.Hyperparameters["b"] = &Hyperparameter{Type: HPCategorical, Values: []any{"x", "y", "z"}}
	e.Hyperparameters["c"] = &Hyperparameter{Type: HPConst, Value: 1.0}
	if got := e.GridSize(); got != 12 {
		t.Errorf("GridSize = %d, want 12", got)
	}
	for i := 0; i < 30; i++ {
		e.Hyperparameters[FormatValue(i)] = &Hyperparameter{Type: HPFloat, Min: 0, Max: 1, Count: MaxCount}
	}
	if got := e.GridSize(); got != math.MaxInt {
		t.Errorf("huge GridSize = %d, want saturation at MaxInt", got)
	}
	e.Hyperparameters["empty"] = &Hyperparameter{Type: HPCategorical}
	if got := e.GridSize(); got != 0 {
		t.Errorf("GridSize with an empty dimension = %d, want 0", got)
	}
}
