//go:build linux

package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/postern-dev/postern/internal/testhosts"
)

// The dashboard in a real browser: headless Chromium opens the URL the
// gateway printed, and the test reads the page through the DevTools
// protocol as a person would see it: the clients listed, a decision made
// after the page opened shown as it happens, and its allow button changing
// the client's policy at the gateway.
func TestGatewayDashboardInChromium(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newGatewayLab(t)
	g := startGateway(t, "", l.gatewayPolicy(), l.Resolver(), Pin("files.test", l.Files.Addr), Pin("web.test", l.Web.Addr), Pin("leak.test", l.Web.Addr))
	alice := g.addClient(t, "alice")
	g.addClient(t, "bob")
	if code, body := g.api(t, "PATCH", "/v1/clients/bob/policy", `{"add_deny": ["bob-denied.test"]}`); code != 200 {
		t.Fatalf("PATCH bob: %d %s", code, body)
	}

	b := startChromium(t, g.Dashboard)
	b.waitFor(t, "the clients listed", `document.querySelector("#clients tbody").innerText`, func(s string) bool {
		return strings.Contains(s, "alice") && strings.Contains(s, "bob") && strings.Contains(s, "bob-denied.test")
	})
	b.waitFor(t, "the live stream", `document.getElementById("status").textContent`, func(s string) bool { return s == "live" })
	// Read from the fragment: the page never asked for it.
	if v := b.eval(t, `document.getElementById("login").hidden`); v != "true" {
		t.Fatalf("the page asks for the token it was given: login hidden = %s", v)
	}
	// The token left the address bar once read.
	if href := b.eval(t, `location.href`); strings.Contains(href, "token=") {
		t.Fatalf("the token stayed in the address: %s", href)
	}

	// A decision made after the page opened shows up on it.
	if r := curl(t, "--proxy", g.proxyAs("alice", alice), "http://leak.test/after-open"); r.HTTP != 403 {
		t.Fatalf("alice to leak.test: %+v", r)
	}
	row := `document.querySelector('#decisions tbody tr[data-host="leak.test"][data-client="alice"]')`
	b.waitFor(t, "alice's denial of leak.test", row+`?.innerText ?? ""`, func(s string) bool {
		return strings.Contains(s, "deny") && strings.Contains(s, "no allow rule matches") && strings.Contains(s, "leak.test:80")
	})
	// Its allow button PATCHes alice's policy; the next connection is let through.
	b.eval(t, row+`.querySelector('button[data-verb="allow"]').click(); "clicked"`)
	waitFor(t, "alice's policy allowing leak.test", func() bool {
		_, body := g.api(t, "GET", "/v1/clients/alice/policy", "")
		return strings.Contains(body, `"leak.test"`)
	})
	if r := curl(t, "--proxy", g.proxyAs("alice", alice), "http://leak.test/after-allow"); r.HTTP != 200 {
		t.Fatalf("alice to leak.test after the button: %+v", r)
	}
	b.waitFor(t, "the clients table showing the change", `document.querySelector('#clients tbody tr[data-client="alice"]').innerText`, func(s string) bool {
		return strings.Contains(s, "leak.test") && strings.Contains(s, "its own")
	})
	// The page reached nothing but the gateway's own origin.
	origin := "http://" + g.API + "/"
	res := b.eval(t, `JSON.stringify(performance.getEntriesByType("resource").map(e => e.name))`)
	var urls []string
	if err := json.Unmarshal([]byte(res), &urls); err != nil || len(urls) == 0 {
		t.Fatalf("resources %q: %v", res, err)
	}
	for _, u := range urls {
		if !strings.HasPrefix(u, origin) {
			t.Fatalf("the page fetched %s, outside the gateway's API %s", u, origin)
		}
	}
	if shot := os.Getenv("POSTERN_DASHBOARD_SCREENSHOT"); shot != "" {
		b.screenshot(t, shot)
	}
}

// browser is one headless Chromium and a DevTools connection to its page.
type browser struct {
	ws   *websocket.Conn
	mu   sync.Mutex
	next int
}

var devtoolsRE = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// startChromium opens url in a fresh headless Chromium, stopped when the
// test ends. Everything that would reach the network on its own is off, and
// every name resolves to nothing: the page can reach the gateway, by
// address, and nothing else.
func startChromium(t *testing.T, url string) *browser {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (Debian's chromium package; .ci/run installs it): %v", err)
	}
	profile := t.TempDir()
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
		"--disable-extensions", "--no-proxy-server", "--window-size=1280,900", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
		"--user-data-dir="+profile, "--remote-debugging-port=0", "--remote-allow-origins=*", url)
	cmd.Env = curlEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	wsc := make(chan string, 1)
	var log strings.Builder
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := devtoolsRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case wsc <- m[1]:
				default:
				}
			}
		}
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			logMu.Lock()
			t.Logf("chromium stderr:\n%s", log.String())
			logMu.Unlock()
		}
	})
	var browserWS string
	select {
	case browserWS = <-wsc:
	case <-done:
		t.Fatalf("chromium exited before it listened:\n%s", log.String())
	case <-time.After(30 * time.Second):
		t.Fatal("chromium did not start its DevTools within 30s")
	}
	// The page's own DevTools endpoint, from the browser's list.
	hostport := strings.TrimPrefix(browserWS, "ws://")
	hostport, _, _ = strings.Cut(hostport, "/")
	var pageWS string
	deadline := time.Now().Add(10 * time.Second)
	for pageWS == "" {
		resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}).Get("http://" + hostport + "/json/list")
		if err == nil {
			var targets []struct {
				Type, URL            string
				WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
			}
			json.NewDecoder(resp.Body).Decode(&targets)
			resp.Body.Close()
			for _, tg := range targets {
				if tg.Type == "page" {
					pageWS = tg.WebSocketDebuggerURL
				}
			}
		}
		if pageWS == "" {
			if time.Now().After(deadline) {
				t.Fatalf("chromium has no page target: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	ws, err := websocket.Dial(pageWS, "", "http://127.0.0.1/")
	if err != nil {
		t.Fatalf("connect to the page's DevTools at %s: %v", pageWS, err)
	}
	ws.MaxPayloadBytes = 64 << 20
	t.Cleanup(func() { ws.Close() })
	return &browser{ws: ws}
}

// call sends one DevTools command and returns its result.
func (b *browser) call(t *testing.T, method string, params any) json.RawMessage {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	id := b.next
	if err := websocket.JSON.Send(b.ws, map[string]any{"id": id, "method": method, "params": params}); err != nil {
		t.Fatalf("devtools %s: %v", method, err)
	}
	b.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		var msg struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := websocket.JSON.Receive(b.ws, &msg); err != nil {
			t.Fatalf("devtools %s: %v", method, err)
		}
		if msg.ID != id {
			continue // an event, or an answer to someone else
		}
		if msg.Error != nil {
			if strings.Contains(msg.Error.Message, "execution context") {
				return nil // the page is still loading: no value yet
			}
			t.Fatalf("devtools %s: %s", method, msg.Error.Message)
		}
		return msg.Result
	}
}

// eval evaluates a JavaScript expression in the page and returns its value
// as a string.
func (b *browser) eval(t *testing.T, expr string) string {
	t.Helper()
	raw := b.call(t, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true})
	if raw == nil {
		return "exception: the page is loading"
	}
	var res struct {
		Result struct {
			Type  string          `json:"type"`
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	if res.ExceptionDetails != nil {
		return "exception: " + res.ExceptionDetails.Exception.Description
	}
	var s string
	if json.Unmarshal(res.Result.Value, &s) == nil {
		return s
	}
	return string(res.Result.Value)
}

// waitFor evaluates expr until ok accepts its value, for up to 10s.
func (b *browser) waitFor(t *testing.T, what, expr string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := b.eval(t, expr)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			body := b.eval(t, `document.body.innerText`)
			t.Fatalf("the page does not show %s within 10s: %s = %q\npage:\n%s", what, expr, v, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *browser) screenshot(t *testing.T, path string) {
	t.Helper()
	raw := b.call(t, "Page.captureScreenshot", map[string]any{"format": "png"})
	var res struct {
		Data string `json:"data"`
	}
	json.Unmarshal(raw, &res)
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Clean(path), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
