package netwall

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/internal/wire"
)

func channelPair(t testing.TB) (*channel, *channel) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := newChannel(os.NewFile(uintptr(fds[0]), "a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := newChannel(os.NewFile(uintptr(fds[1]), "b"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestChannelCarriesMessagesAndDescriptors(t *testing.T) {
	a, b := channelPair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	big := make([]string, 5000) // a large environment crosses in pieces
	for i := range big {
		big[i] = "VAR=0123456789012345678901234567890123456789012345678901234567890123456789"
	}
	go func() {
		_ = a.send(message{Type: msgConfig, Config: &initConfig{Command: []string{"true"}, Env: big}})
		_ = a.send(message{Type: msgReady}, w)
	}()
	m, files, err := b.recv()
	if err != nil || m.Type != msgConfig || len(m.Config.Env) != len(big) || len(files) != 0 {
		t.Fatalf("first message: %+v, %d files, %v", m.Type, len(files), err)
	}
	m, files, err = b.recv()
	if err != nil || m.Type != msgReady || len(files) != 1 {
		t.Fatalf("second message: %q, %d files, %v", m.Type, len(files), err)
	}
	defer files[0].Close()
	if _, err := files[0].Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := r.Read(buf); err != nil || buf[0] != 'x' {
		t.Fatalf("the passed descriptor is not the pipe: %q, %v", buf, err)
	}
}

// FuzzChannelRecv feeds arbitrary bytes to the control channel's reader: it
// must fail cleanly, never panic or take more than maxMessage.
func FuzzChannelRecv(f *testing.F) {
	frame := func(m message) []byte {
		return wire.Append(nil, frameMessage, encodeMessage(m))
	}
	f.Add(frame(message{Type: msgStarted, Pid: 2}))
	f.Add(append(frame(message{Type: msgSignal, Signal: 15}), frame(message{Type: msgError, Err: &wireError{Step: "x"}})...))
	f.Add([]byte{frameMessage, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{frameMessage, 0, 0, 0, 2, 1, 'x'})
	f.Add([]byte{frameMessage + 1, 0, 0, 0, 2, 1, 'x'})
	f.Add([]byte{frameMessage, 0, 0, 0, 3, 0x7f, 'x', 'y'})
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := channelPair(t)
		go func() {
			a.conn.Write(data)
			a.conn.CloseWrite()
		}()
		for range 64 {
			if _, files, err := b.recv(); err != nil {
				return
			} else {
				for _, f := range files {
					f.Close()
				}
			}
		}
	})
}
