package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/virga-ml/virga"
)

// TestLookupWhileStarting: a server that owns the data directory but does
// not serve yet (here: waiting for its database) is Starting, never taken
// for the server before it, whose server.json is still on disk; once it
// gave up, no server runs.
func TestLookupWhileStarting(t *testing.T) {
	dir := t.TempDir()
	// The server before: its server.json, its address now closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	old := "http://" + ln.Addr().String()
	ln.Close()
	if err := os.WriteFile(filepath.Join(dir, "server.json"), []byte(`{"url":"`+old+`","pid":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A database address where nothing listens: Start waits for it.
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	db := "postgres://virga@" + ln.Addr().String() + "/virga"
	ln.Close()

	var whileWaiting []State
	fc := &fakeClock{t: time.Unix(1e9, 0), onSleep: func(int) {
		info, st := Lookup(dir)
		whileWaiting = append(whileWaiting, st)
		if st != Starting {
			t.Errorf("Lookup while the server waits for its database = %+v, %v; want Starting", info, st)
		}
		if info, ok := Running(dir); ok {
			t.Errorf("Running while the server waits for its database = %+v; want not serving", info)
		}
	}}
	_, err = Start(context.Background(), Config{DataDir: dir, DB: db, DBWait: time.Second, Capacity: virga.Resources{CPU: 1, MemoryMB: 512},
		WarmShims: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), clock: fc.clock()})
	if err == nil {
		t.Fatal("Start with a database that never listens succeeded")
	}
	if len(whileWaiting) == 0 {
		t.Fatal("Start did not wait for the database")
	}
	if info, st := Lookup(dir); st != NotRunning {
		t.Errorf("Lookup after Start gave up = %+v, %v; want NotRunning", info, st)
	}
}
