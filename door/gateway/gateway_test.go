package gateway

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/records"
)

func TestEventRingsAreBoundedPerClientAndFollowersMissNothing(t *testing.T) {
	s := newEventStore(3)
	for i := 0; i < 5; i++ {
		s.add(event.Event{Event: "decision", Client: "alice", Decision: "allow", Host: "a"}, true)
	}
	s.add(event.Event{Event: "decision", Client: "bob", Decision: "deny"}, true)
	s.add(event.Event{Event: "decision", Client: "mallory", Decision: "deny"}, false)
	got := s.query(Filter{Client: "alice"})
	if len(got) != 3 || got[0].Seq != 3 || got[2].Seq != 5 {
		t.Fatalf("alice's ring: %+v", got)
	}
	if got := s.query(Filter{}); len(got) != 5 || got[4].Client != "mallory" {
		t.Fatalf("every ring: %+v", got)
	}
	if got := s.query(Filter{Client: "mallory"}); len(got) != 1 {
		t.Fatalf("an unregistered name's events: %+v", got)
	}
	if got := s.query(Filter{Decision: "deny", AfterSeq: 6}); len(got) != 1 || got[0].Client != "mallory" {
		t.Fatalf("deny after 6: %+v", got)
	}
	past, fl, stop := s.follow(Filter{Client: "bob"}, 1)
	defer stop()
	if len(past) != 1 {
		t.Fatalf("bob's past: %+v", past)
	}
	s.add(event.Event{Event: "decision", Client: "alice"}, true)
	s.add(event.Event{Event: "decision", Client: "bob"}, true)
	s.add(event.Event{Event: "decision", Client: "bob"}, true)
	if r := <-fl.ch; r.Client != "bob" || r.Seq != 9 {
		t.Fatalf("followed %+v", r)
	}
	if n := s.takeLost(fl); n != 1 {
		t.Fatalf("lost %d, want the one that did not fit", n)
	}
}

func TestRunStopsEverythingItStarted(t *testing.T) {
	store, err := records.Open(filepath.Join(t.TempDir(), "records.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AddClient(store, "alice"); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	g, err := New(Config{Store: store, Default: policy.Nothing(), APIToken: "0123456789abcdef0123", ReloadEvery: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pl, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx, Listeners{Proxy: pl, API: al}) }()
	// A follower holds a request open; stopping must end it too.
	var resp *http.Response
	for i := 0; i < 100; i++ {
		req, _ := http.NewRequest("GET", "http://"+al.Addr().String()+"/v1/events?follow=1", nil)
		req.Header.Set("Authorization", "Bearer 0123456789abcdef0123")
		if resp, err = (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("follow: %v %v", resp, err)
	}
	if _, ok := g.clientInfo("alice"); !ok {
		t.Fatal("alice was not loaded")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context ending")
	}
	resp.Body.Close()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before+2 { // the test's own HTTP client may keep one
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), strings.TrimSpace(string(buf[:runtime.Stack(buf, true)])))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
