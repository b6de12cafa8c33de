package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A small trace through every policy: every request is accounted for, the
// static baseline refuses exactly the requests for the models it did not
// pin, the engine's own policy loads those on demand, and neither exceeds
// the memory budget.
func TestManyModelsSmallTrace(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "alibaba-clusterdata", "cluster-trace-v2026-GenAI")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Four models: A most requested, then B, C, D; 40 requests.
	var sb strings.Builder
	sb.WriteString("gmt_create,predict_type,predict_status,exec_time_seconds,groupId,prompt_length,negative_prompt_length,num_images_per_prompt,num_inference_steps,checkpoint_model_version_id,num_lora\n")
	models := []string{"A", "A", "B", "A", "C", "A", "B", "D"}
	at := time.Date(2024, 11, 15, 16, 0, 0, 0, time.UTC)
	perModel := map[string]int{}
	for i := range 40 {
		m := models[i%len(models)]
		perModel[m]++
		fmt.Fprintf(&sb, "%s,TXT_2_IMG,SUCCEED,1.0,G0,1,,1,1,%s,0\n", at.Add(time.Duration(i)*time.Minute).Format("2006-01-02 15:04:05"), m)
	}
	if err := os.WriteFile(filepath.Join(dir, "lora_request_trace.csv"), []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "runs.jsonl")
	// Hidden sizes 8, 8, 8, 8: a budget of half the memory holds two models.
	args := []string{"-data", data, "-models", "4", "-duration", "400ms", "-objective", "5s", "-budget", "0.5", "-hidden", "8", "-out", out}
	if err := manyModels(args, io.Discard); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	runs := map[string]mmResult{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r mmResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		runs[r.Policy] = r
	}
	for _, p := range []string{"engine", "admit", "cost", "static"} {
		r, ok := runs[p]
		if !ok {
			t.Fatalf("no %s run in %v", p, runs)
		}
		notAnswered := 0
		for _, c := range r.NotAnswered {
			notAnswered += c
		}
		if r.Requests != 40 || r.OnTime+r.Late+notAnswered != 40 {
			t.Errorf("%s: %d requests, %d on time + %d late + %v not answered, want 40 in all", p, r.Requests, r.OnTime, r.Late, r.NotAnswered)
		}
		if r.MaxMemory > r.Budget {
			t.Errorf("%s: memory reached %d bytes, over the budget of %d", p, r.MaxMemory, r.Budget)
		}
	}
	// The static set is A and B (the two most requested; two fit).
	if got, want := runs["static"].NotAnswered["NotLoaded"], perModel["C"]+perModel["D"]; got != want || runs["static"].Loads != 0 {
		t.Errorf("static: %d NotLoaded and %d loads, want %d (the requests for C and D) and 0", got, runs["static"].Loads, want)
	}
	if e := runs["engine"]; e.NotAnswered["NotLoaded"] != 0 || e.Loads < 2 || e.OnTime+e.Late <= runs["static"].OnTime+runs["static"].Late {
		t.Errorf("engine: %+v; want C and D loaded on demand (2 loads or more), and more answered than static's %+v", e, runs["static"])
	}
}
