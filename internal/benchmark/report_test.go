//go:build linux

package benchmark

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The door's report says what the machine allows beside each goal: the
// throughput ceiling at the door path's CPU per GiB, and the setup floor of
// the fastest connect to a proxy plus one round trip.
func TestMarkdownMachineBounds(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	rep := &Report{
		Machine: Machine{Cores: 2},
		Paths: []PathResult{
			{Name: "direct", Throughput: 1 << 31, ThroughputRatio: 1, CPUPerGiB: 0.5,
				LatP50: us(150), ConnectP50: us(70), EchoP50: us(80), IdleLatP50: us(500), IdleLatP99: us(900)},
			{Name: "postern door", Throughput: 1 << 30, ThroughputRatio: 0.5, CPUPerGiB: 1.25,
				LatP50: us(500), ConnectP50: us(90), Connect200P50: us(250), EchoP50: us(160), IdleLatP50: us(1300), IdleLatP99: us(3000), RPS: 3000},
			{Name: "tinyproxy", Throughput: 1 << 28, ThroughputRatio: 0.125, CPUPerGiB: 4,
				LatP50: us(400), ConnectP50: us(85), Connect200P50: us(200), EchoP50: us(115), IdleLatP50: us(900), IdleLatP99: us(2000), RPS: 2000},
		},
	}
	var b bytes.Buffer
	if err := rep.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		// 2 cores ÷ 1.25 s per GiB = 1.6 GiB/s, against 2 GiB/s direct.
		"| postern door | 1074 | 0.50× | 1.25 | 0.80× |",
		"| direct | 2147 | 1.00× | 0.50 | 2.00× |",
		"| postern door | 90 | 250 | 160 |",
		// tinyproxy's 85 µs connect is the fastest, plus direct's 80 µs echo.
		"together 165 µs spent before the proxy does any work of its own",
		// Goals are ratios to the other paths of the run; a path not run is said so.
		"| added setup p50 ÷ tinyproxy's | ≤ 1.2× | 1.40× | **no** | ≥ 165 µs added |",
		"| keep-alive requests/s ÷ tinyproxy's | > 1.0× | 1.50× | yes | – |",
		"| throughput ÷ squid's | ≥ 1.5× | – | not measured (squid not run) | – |",
		"| postern door | 1300 | 3000 | +800 | 2.60× |",
		// door ÷ tinyproxy: added 350 ÷ 250 back to back, 800 ÷ 400 after idling.
		"| tinyproxy | 4.00× | 1.40× | 2.00× | 1.50× |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
