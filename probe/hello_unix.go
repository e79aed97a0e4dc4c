//go:build linux || darwin

package probe

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"time"
)

// A probe child proves it reached the door by a line of hello, which the
// prober answers with a line of ok.
const (
	probeHello = "postern-probe"
	probeOK    = "ok"
)

// sayHello dials addr from the child, says hello and expects ok.
func sayHello(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(c, probeHello); err != nil {
		return fmt.Errorf("write to %s: %w", addr, err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read from %s: %w", addr, err)
	}
	if got := strings.TrimSpace(line); got != probeOK {
		return fmt.Errorf("%s answered %q, want %q", addr, got, probeOK)
	}
	return nil
}

// answerHello reads the child's hello on c, as the door's end, and says ok.
func answerHello(c net.Conn) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != probeHello {
		return fmt.Errorf("child said %q (%v), want %q", line, err, probeHello)
	}
	_, err = fmt.Fprintln(c, probeOK)
	return err
}
