package wallimage

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func find(t *testing.T, p string) (Image, error) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	return Find(f, st.Size())
}

func TestAttachFindRoundTrip(t *testing.T) {
	exe := bytes.Repeat([]byte("the binary "), 1000)
	img := bytes.Repeat([]byte("the init "), 300)
	pe, pi := write(t, "postern", exe), write(t, "postern-wall", img)
	if _, err := find(t, pe); !errors.Is(err, ErrNone) {
		t.Fatalf("a plain binary: %v, want ErrNone", err)
	}
	if err := Attach(pe, pi); err != nil {
		t.Fatal(err)
	}
	got, err := find(t, pe)
	if err != nil {
		t.Fatal(err)
	}
	if got.Offset != int64(len(exe)) || got.Size != int64(len(img)) || got.Sum != sha256.Sum256(img) {
		t.Fatalf("found %+v, want offset %d size %d", got, len(exe), len(img))
	}
	all, _ := os.ReadFile(pe)
	if !bytes.Equal(all[:len(exe)], exe) || !bytes.Equal(all[got.Offset:got.Offset+got.Size], img) {
		t.Fatal("the binary's bytes or the image's changed")
	}

	// Attached again, with another image: replaced, not stacked.
	img2 := []byte("a shorter init")
	if err := Attach(pe, write(t, "other", img2)); err != nil {
		t.Fatal(err)
	}
	got, err = find(t, pe)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(pe)
	if got.Offset != int64(len(exe)) || got.Size != int64(len(img2)) || st.Size() != int64(len(exe)+len(img2)+TrailerSize) {
		t.Fatalf("after a second attach: %+v in %d bytes", got, st.Size())
	}
}

func TestFindRefusesALengthPastTheStart(t *testing.T) {
	var tr [TrailerSize]byte
	copy(tr[:], magic[:])
	binary.LittleEndian.PutUint64(tr[16:], 1<<20)
	p := write(t, "short", append([]byte("tiny"), tr[:]...))
	if _, err := find(t, p); err == nil || errors.Is(err, ErrNone) {
		t.Fatalf("a trailer claiming more than the file holds: %v", err)
	}
}

func FuzzFind(f *testing.F) {
	var tr [TrailerSize]byte
	copy(tr[:], magic[:])
	binary.LittleEndian.PutUint64(tr[16:], 4)
	f.Add(append([]byte("exe!init"), tr[:]...))
	f.Add([]byte("no trailer at all"))
	f.Fuzz(func(t *testing.T, data []byte) {
		img, err := Find(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		if img.Offset < 0 || img.Size <= 0 || img.Offset+img.Size+TrailerSize != int64(len(data)) {
			t.Fatalf("found %+v in %d bytes", img, len(data))
		}
	})
}
