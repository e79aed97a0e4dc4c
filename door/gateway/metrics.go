package gateway

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/postern-dev/postern/door/event"
)

// judgeBuckets are the upper bounds, in seconds, of the judgement latency
// histogram: from a pinned name (microseconds) to a slow resolver.
var judgeBuckets = []float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1}

type decisionKey struct{ client, decision string }

// metrics counts what the events tell. A client label is a registered
// client's name, or "" for requests that named none (refused credentials).
type metrics struct {
	mu         sync.Mutex
	decisions  map[decisionKey]uint64
	bytesUp    map[string]uint64
	bytesDown  map[string]uint64
	tunnels    map[uint64]string // open CONNECT tunnels: conn -> client
	authFail   map[string]uint64 // by problem
	judgeCount []uint64          // per bucket, not cumulative; the last is +Inf
	judgeSum   float64
	judgeN     uint64
	lost       uint64 // events followers missed
}

func newMetrics() *metrics {
	return &metrics{
		decisions: map[decisionKey]uint64{}, bytesUp: map[string]uint64{}, bytesDown: map[string]uint64{},
		tunnels: map[uint64]string{}, authFail: map[string]uint64{}, judgeCount: make([]uint64, len(judgeBuckets)+1),
	}
}

// observe counts one event; client is its label.
func (m *metrics) observe(ev event.Event, client string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch ev.Event {
	case event.Decided:
		m.decisions[decisionKey{client, string(ev.Decision)}]++
		if ev.Kind == event.Connect && ev.Decision == event.Allow && ev.Addr != "" {
			if _, ok := m.tunnels[ev.Conn]; !ok {
				m.tunnels[ev.Conn] = client
			}
		}
		if ev.JudgeNS > 0 {
			s := time.Duration(ev.JudgeNS).Seconds()
			i, _ := slices.BinarySearch(judgeBuckets, s)
			m.judgeCount[i]++
			m.judgeSum += s
			m.judgeN++
		}
	case event.Ended:
		if ev.Kind == event.Connect {
			delete(m.tunnels, ev.Conn)
		}
		m.bytesUp[client] += uint64(max(ev.BytesUp, 0))
		m.bytesDown[client] += uint64(max(ev.BytesDown, 0))
	}
}

func (m *metrics) authFailed(problem string) {
	m.mu.Lock()
	m.authFail[problem]++
	m.mu.Unlock()
}

func (m *metrics) followerLost(n int) {
	m.mu.Lock()
	m.lost += uint64(n)
	m.mu.Unlock()
}

// forget drops a removed client's series.
func (m *metrics) forget(client string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.decisions {
		if k.client == client {
			delete(m.decisions, k)
		}
	}
	delete(m.bytesUp, client)
	delete(m.bytesDown, client)
}

// write writes every series in Prometheus' text exposition format (0.0.4).
func (m *metrics) write(w io.Writer, clients int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	head := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	head("postern_gateway_clients", "gauge", "Clients registered with the gateway.")
	fmt.Fprintf(&b, "postern_gateway_clients %d\n", clients)

	head("postern_gateway_decisions_total", "counter", "Decisions on connection attempts, by client and verdict.")
	keys := slices.SortedFunc(maps.Keys(m.decisions), func(a, b decisionKey) int {
		if c := strings.Compare(a.client, b.client); c != 0 {
			return c
		}
		return strings.Compare(a.decision, b.decision)
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "postern_gateway_decisions_total{client=%s,decision=%s} %d\n", label(k.client), label(k.decision), m.decisions[k])
	}

	head("postern_gateway_open_tunnels", "gauge", "CONNECT tunnels open now, by client.")
	open := map[string]int{}
	for _, c := range m.tunnels {
		open[c]++
	}
	for _, c := range slices.Sorted(maps.Keys(open)) {
		fmt.Fprintf(&b, "postern_gateway_open_tunnels{client=%s} %d\n", label(c), open[c])
	}

	head("postern_gateway_bytes_total", "counter", "Bytes relayed on closed connections, by client and direction (up: from the client).")
	for _, c := range slices.Sorted(maps.Keys(m.bytesUp)) {
		fmt.Fprintf(&b, "postern_gateway_bytes_total{client=%s,direction=\"up\"} %d\n", label(c), m.bytesUp[c])
		fmt.Fprintf(&b, "postern_gateway_bytes_total{client=%s,direction=\"down\"} %d\n", label(c), m.bytesDown[c])
	}

	head("postern_gateway_auth_failures_total", "counter", "Requests refused with 407, by what was wrong with their credentials.")
	for _, p := range []string{authMissing, authMalformed, authUnknown, authWrong, authOtherClient} {
		fmt.Fprintf(&b, "postern_gateway_auth_failures_total{problem=%s} %d\n", label(p), m.authFail[p])
	}

	head("postern_gateway_judgement_seconds", "histogram", "How long judging a destination took (the name and every address it resolved to).")
	var cum uint64
	for i, le := range judgeBuckets {
		cum += m.judgeCount[i]
		fmt.Fprintf(&b, "postern_gateway_judgement_seconds_bucket{le=\"%s\"} %d\n", strconv.FormatFloat(le, 'g', -1, 64), cum)
	}
	cum += m.judgeCount[len(judgeBuckets)]
	fmt.Fprintf(&b, "postern_gateway_judgement_seconds_bucket{le=\"+Inf\"} %d\n", cum)
	fmt.Fprintf(&b, "postern_gateway_judgement_seconds_sum %s\n", strconv.FormatFloat(m.judgeSum, 'g', -1, 64))
	fmt.Fprintf(&b, "postern_gateway_judgement_seconds_count %d\n", m.judgeN)

	head("postern_gateway_follow_events_lost_total", "counter", "Events a follower of /v1/events fell too far behind to get.")
	fmt.Fprintf(&b, "postern_gateway_follow_events_lost_total %d\n", m.lost)
	io.WriteString(w, b.String())
}

// label quotes a label value as the text format wants it.
func label(v string) string {
	r := strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
	return `"` + r.Replace(v) + `"`
}
