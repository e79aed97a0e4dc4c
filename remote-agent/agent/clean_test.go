package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func hashOf(c byte) string { return strings.Repeat(string(c), 64) }

func TestParseListing(t *testing.T) {
	out := "/home/u/.cache/postern/agents\n" +
		"agent 1 1700000300 12000 " + hashOf('a') + "\n" +
		"agent 0 1700000200 4 " + hashOf('b') + "\n" +
		"agent 1 1700000100 12000 not-an-agent\n" + // not postern's: left out
		"agent 1 x 12000 " + hashOf('c') + "\n" + // unreadable: left out
		"agent 1 1700000000 12000 " + hashOf('d') + "\n"
	abs, found, err := parseListing(out)
	if err != nil {
		t.Fatal(err)
	}
	if abs != "/home/u/.cache/postern/agents" {
		t.Fatalf("abs %q", abs)
	}
	var got []string
	for _, in := range found {
		got = append(got, fmt.Sprintf("%.1s %v %d %s", in.Hash, in.Complete, in.KiB, in.Path))
	}
	want := []string{
		"a true 12000 /home/u/.cache/postern/agents/" + hashOf('a'),
		"b false 4 /home/u/.cache/postern/agents/" + hashOf('b'),
		"d true 12000 /home/u/.cache/postern/agents/" + hashOf('d'),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if abs, found, err := parseListing("none\n"); err != nil || abs != "" || found != nil {
		t.Fatalf("none: %q %v %v", abs, found, err)
	}
	if _, _, err := parseListing("sh: banner\n"); err == nil {
		t.Fatal("a listing not starting with an absolute path was taken")
	}
}

func TestToPrune(t *testing.T) {
	now := time.Unix(1_700_010_000, 0)
	at := func(h byte, ago time.Duration, complete bool) Installed {
		return Installed{Hash: hashOf(h), Path: "/a/" + hashOf(h), Mtime: now.Add(-ago).Unix(), Complete: complete}
	}
	// Newest first, as ListInstalled gives them.
	found := []Installed{
		at('n', time.Minute, false),  // an install under way: kept
		at('c', 2*time.Minute, true), // the one just installed
		at('p', time.Hour, true),     // the one before: kept
		at('s', 2*time.Hour, false),  // a failed install, old: removed
		at('o', 3*time.Hour, true),   // older: removed
		at('q', 4*time.Hour, true),   // older: removed
	}
	var got []string
	for _, in := range toPrune(found, hashOf('c'), now) {
		got = append(got, in.Hash[:1])
	}
	if want := []string{"s", "o", "q"}; !slices.Equal(got, want) {
		t.Fatalf("pruned %v, want %v", got, want)
	}
	// The current one is kept even when it is not the newest.
	got = nil
	for _, in := range toPrune(found, hashOf('q'), now) {
		got = append(got, in.Hash[:1])
	}
	if want := []string{"p", "s", "o"}; !slices.Equal(got, want) {
		t.Fatalf("pruned %v, want %v", got, want)
	}
}

// Installing a third version removes the oldest and tells Removed; the two
// newest stay.
func TestInstallKeepsTwoVersions(t *testing.T) {
	f := newFakeRemote()
	dir := t.TempDir()
	var removed []string
	var hashes []string
	for i := range 3 {
		bin := filepath.Join(dir, fmt.Sprintf("agent%d", i))
		if err := os.WriteFile(bin, []byte(fmt.Sprintf("agent %d %s", i, strings.Repeat("x", 5000))), 0o755); err != nil {
			t.Fatal(err)
		}
		h, err := FileHash(bin)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h)
		in := Install{Binary: bin, Hash: h, Version: "test", Removed: func(g Installed) { removed = append(removed, g.Hash) },
			Warn: func(w string) { t.Errorf("warning: %s", w) }}
		if _, err := ensure(context.Background(), f, in); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(removed, hashes[:1]) {
		t.Fatalf("removed %v, want the first, %v", removed, hashes[:1])
	}
	base := f.home + "/.cache/postern/agents/"
	for i, h := range hashes {
		_, there := f.files[base+h+"/postern"]
		if there != (i > 0) {
			t.Fatalf("version %d there: %v", i, there)
		}
	}
}

func FuzzParseListing(f *testing.F) {
	f.Add("/x\nagent 1 1 1 " + hashOf('a') + "\n")
	f.Add("none\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, out string) {
		abs, found, err := parseListing(out)
		if err != nil {
			return
		}
		for _, in := range found {
			if !hashName().MatchString(in.Hash) || in.Path != strings.TrimRight(abs, "/")+"/"+in.Hash {
				t.Fatalf("listing %q gave %+v", out, in)
			}
		}
	})
}
