package loadgen

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sharedData returns the path of a file under the shared traces directory
// (../shared/data beside the repository, as the benchmarks' -data flags
// default to), looking up from the test's directory.
func sharedData(t *testing.T, rel string) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "shared", "data", rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skipf("the shared trace %s is not beside this checkout", rel)
		}
		dir = parent
	}
}

func TestReadAzure(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319600,3180,8\n2023-11-16 18:17:04.5,110,27"
	a, err := ReadAzure(strings.NewReader(in), "t.csv")
	if err != nil {
		t.Fatal(err)
	}
	want := Arrivals{0, 52 * time.Millisecond, 520040 * time.Microsecond}
	if len(a) != 3 || a[1] != want[1] || a[2] != want[2] {
		t.Errorf("arrivals %v, want %v", a, want)
	}
}

func TestReadAzureNamesTheBadField(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\nyesterday,1,1\n"
	_, err := ReadAzure(strings.NewReader(in), "t.csv")
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 3 || pe.Field != "TIMESTAMP" || !strings.HasPrefix(err.Error(), "t.csv:3: TIMESTAMP") {
		t.Errorf("error %v, want t.csv:3: TIMESTAMP ...", err)
	}
	if _, err := ReadAzure(strings.NewReader("a,b\n1,2\n"), "t.csv"); err == nil || !strings.Contains(err.Error(), "no TIMESTAMP column") {
		t.Errorf("error %v, want no TIMESTAMP column", err)
	}
}

func TestReadTheRealAzureTrace(t *testing.T) {
	f, err := os.Open(sharedData(t, "azure-llm-inference-trace-2023/data/AzureLLMInferenceTrace_conv.csv"))
	if err != nil {
		t.Fatalf("the shared trace: %v", err)
	}
	defer f.Close()
	a, err := ReadAzure(f, f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 19366 {
		t.Errorf("%d arrivals, want 19366 (SOURCE.md)", len(a))
	}
	if span := a[len(a)-1]; span < 55*time.Minute || span > 61*time.Minute {
		t.Errorf("span %v, want about an hour", span)
	}
	s := a.Scale(1000)
	if r := s.Rate(); math.Abs(r-1000) > 1e-6*1000 {
		t.Errorf("scaled rate %v, want 1000", r)
	}
}

func TestReadAlibabaLoRA(t *testing.T) {
	in := "gmt_create,predict_type,predict_status,exec_time_seconds,groupId,prompt_length,negative_prompt_length,num_images_per_prompt,num_inference_steps,checkpoint_model_version_id,num_lora\n" +
		"2024-11-15 16:57:50,TXT_2_IMG,SUCCEED,32.0,G0000,63.0,26.0,1.0,30.0,M0000,0\n" +
		"2024-11-15 18:16:14,TXT_2_IMG,FAILED,,G0001,93.0,,1.0,40.0,M0001,0\n" +
		"2024-11-15 18:17:06,TXT_2_IMG,SUCCEED,36.0,G0001,93.0,,8.0,40.0,M0001,0\n"
	reqs, err := ReadAlibabaLoRA(strings.NewReader(in), "l.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 3 || reqs[0].Exec != 32*time.Second || reqs[1].OK || reqs[2].Model != "M0001" {
		t.Fatalf("read %+v", reqs)
	}
	pop := Popularities(reqs)
	if pop[0].Model != "M0001" || pop[0].Requests != 2 {
		t.Errorf("popularity %+v, want M0001 first with 2", pop)
	}
	bad := strings.Replace(in, "36.0", "soon", 1)
	if _, err := ReadAlibabaLoRA(strings.NewReader(bad), "l.csv"); err == nil || !strings.HasPrefix(err.Error(), "l.csv:4: exec_time_seconds") {
		t.Errorf("error %v, want l.csv:4: exec_time_seconds", err)
	}
}

func TestReadTheRealAlibabaTrace(t *testing.T) {
	f, err := os.Open(sharedData(t, "alibaba-clusterdata/cluster-trace-v2026-GenAI/lora_request_trace.csv"))
	if err != nil {
		t.Fatalf("the shared trace: %v", err)
	}
	defer f.Close()
	reqs, err := ReadAlibabaLoRA(f, f.Name())
	if err != nil {
		t.Fatal(err)
	}
	pop := Popularities(reqs)
	// 25 requests recorded while pending name no model.
	if len(reqs) != 26823 || len(pop) != 86 || pop[0].Model != "M0002" || math.Abs(pop[0].Share-0.31) > 0.01 {
		t.Errorf("%d requests, %d models, top %+v; want 26823, 86, M0002 at 31%%", len(reqs), len(pop), pop[0])
	}
}

func TestPoissonRate(t *testing.T) {
	a := Poisson(rand.New(rand.NewPCG(1, 1)), 500, 20000)
	if r := a.Rate(); math.Abs(r-500)/500 > 0.03 {
		t.Errorf("rate %v, want 500 within 3%%", r)
	}
}

func FuzzReadAzure(f *testing.F) {
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n")
	f.Add("TIMESTAMP\n\"2023-11-16 18:17:03\"\n2023-11-16 18:17:02.1\n")
	f.Add("x,TIMESTAMP\n1\n")
	f.Fuzz(func(t *testing.T, in string) {
		a, err := ReadAzure(strings.NewReader(in), "f.csv")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.csv:") {
				t.Fatalf("error without the file: %v", err)
			}
			return
		}
		for i := 1; i < len(a); i++ {
			if a[i] < a[i-1] {
				t.Fatalf("arrivals out of order at %d: %v", i, a)
			}
		}
	})
}

func FuzzReadAlibabaLoRA(f *testing.F) {
	f.Add("gmt_create,predict_status,exec_time_seconds,checkpoint_model_version_id\n2024-11-15 16:57:50,SUCCEED,32.0,M0000\n")
	f.Add("checkpoint_model_version_id,gmt_create,exec_time_seconds,predict_status\nM1,2024-11-15 16:57:50,,FAILED\n")
	f.Fuzz(func(t *testing.T, in string) {
		reqs, err := ReadAlibabaLoRA(strings.NewReader(in), "f.csv")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.csv:") {
				t.Fatalf("error without the file: %v", err)
			}
			return
		}
		for _, r := range reqs {
			if r.Exec < 0 {
				t.Fatalf("accepted %+v", r)
			}
		}
		a := LoRAArrivals(reqs, nil)
		for i := 1; i < len(a); i++ {
			if a[i] < a[i-1] {
				t.Fatalf("arrivals out of order")
			}
		}
	})
}
