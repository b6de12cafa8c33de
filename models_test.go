package virga

import (
	"strings"
	"testing"
)

func TestParseModelRef(t *testing.T) {
	tests := []struct {
		in      string
		want    ModelRef
		wantErr string // a part of the error; "" for none
	}{
		{in: "digits", want: ModelRef{Name: "digits"}},
		{in: "digits@prod", want: ModelRef{Name: "digits", Alias: "prod"}},
		{in: "digits:2", want: ModelRef{Name: "digits", Version: 2}},
		{in: "my_model-1.0:12", want: ModelRef{Name: "my_model-1.0", Version: 12}},
		{in: "7up@canary-2", want: ModelRef{Name: "7up", Alias: "canary-2"}},
		{in: "", wantErr: "empty"},
		{in: "digits:", wantErr: "want a positive integer"},
		{in: "digits:0", wantErr: "want a positive integer"},
		{in: "digits:-1", wantErr: "want a positive integer"},
		{in: "digits:+1", wantErr: "want a positive integer"},
		{in: "digits:x", wantErr: "want a positive integer"},
		{in: "digits:1:2", wantErr: "want a positive integer"},
		{in: "digits@", wantErr: "alias: empty"},
		{in: "digits@2", wantErr: "must start with a letter"},
		{in: "digits@latest", wantErr: "reserved"},
		{in: "digits@a@b", wantErr: "not allowed"},
		{in: "@prod", wantErr: "model name: empty"},
		{in: ":1", wantErr: "model name: empty"},
		{in: "-x", wantErr: "must start with a letter or a digit"},
		{in: "a/b", wantErr: "'/' at offset 1"},
		{in: strings.Repeat("a", MaxModelName+1), wantErr: "longer than the limit"},
	}
	for _, tc := range tests {
		got, err := ParseModelRef(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseModelRef(%q) = %+v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseModelRef(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if back := got.String(); back != tc.in {
			t.Errorf("ParseModelRef(%q).String() = %q", tc.in, back)
		}
	}
}

// FuzzParseModelRef checks that what ParseModelRef accepts is well formed
// and reads back the same from its String.
func FuzzParseModelRef(f *testing.F) {
	for _, s := range []string{"digits", "digits@prod", "digits:2", "a:01", "x@latest", "", ":", "@", "a:9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseModelRef(s)
		if err != nil {
			return
		}
		if CheckModelName(r.Name) != nil || r.Version < 0 || r.Version > 0 && r.Alias != "" {
			t.Fatalf("ParseModelRef(%q) = %+v: not well formed", s, r)
		}
		if r.Alias != "" && CheckAliasName(r.Alias) != nil {
			t.Fatalf("ParseModelRef(%q) = %+v: bad alias accepted", s, r)
		}
		again, err := ParseModelRef(r.String())
		if err != nil || again != r {
			t.Fatalf("ParseModelRef(%q) = %+v, but its String %q reads back as %+v, %v", s, r, r.String(), again, err)
		}
	})
}
