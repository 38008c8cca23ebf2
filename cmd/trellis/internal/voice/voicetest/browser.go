package voicetest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Browser is a headless Chromium driven through the DevTools protocol:
// enough of it to open a page and evaluate script in it.
type Browser struct {
	t   testing.TB
	cmd *exec.Cmd
	ws  *websocket.Conn

	mu      sync.Mutex
	next    int
	pending map[int]chan cdpReply
	log     strings.Builder
	done    chan struct{}
}

type cdpReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

var devtoolsRE = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// Chromium starts Debian's chromium, headless, with loopback allowed in
// WebRTC (the only interface the tests' namespace has) and a fake
// microphone that needs no permission.
func Chromium(t testing.TB) *Browser {
	t.Helper()
	bin := Need(t, "chromium", "chromium")
	b := &Browser{t: t, pending: map[int]chan cdpReply{}, done: make(chan struct{})}
	b.cmd = exec.Command(bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
		"--remote-debugging-port=0", "--user-data-dir="+t.TempDir(),
		"--allow-loopback-in-peer-connection", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
		"--autoplay-policy=no-user-gesture-required", "about:blank")
	stderr, err := b.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	t.Cleanup(b.Close)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			b.mu.Lock()
			b.log.WriteString(line + "\n")
			b.mu.Unlock()
			if m := devtoolsRE.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	var browserURL string
	select {
	case browserURL = <-found:
	case <-time.After(30 * time.Second):
		t.Fatalf("chromium did not open its DevTools port:\n%s", b.Log())
	}
	// the page target's socket: /json/list on the same host
	host := strings.TrimPrefix(browserURL, "ws://")
	host = host[:strings.Index(host, "/")]
	var targets []struct {
		Type string `json:"type"`
		WS   string `json:"webSocketDebuggerUrl"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + host + "/json/list")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&targets)
			resp.Body.Close()
		}
		if err == nil && len(targets) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromium lists no page: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var page string
	for _, tg := range targets {
		if tg.Type == "page" {
			page = tg.WS
		}
	}
	if page == "" {
		t.Fatal("chromium has no page target")
	}
	b.ws, _, err = websocket.DefaultDialer.Dial(page, nil)
	if err != nil {
		t.Fatal(err)
	}
	go b.read()
	return b
}

func (b *Browser) read() {
	defer close(b.done)
	for {
		var m struct {
			ID int `json:"id"`
			cdpReply
		}
		if err := b.ws.ReadJSON(&m); err != nil {
			return
		}
		if m.ID == 0 {
			continue // an event
		}
		b.mu.Lock()
		ch := b.pending[m.ID]
		delete(b.pending, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m.cdpReply
		}
	}
}

// call sends a DevTools command and waits for its result.
func (b *Browser) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan cdpReply, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	if err := b.ws.WriteJSON(map[string]any{"id": id, "method": method, "params": params}); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, r.Error.Message)
		}
		return r.Result, nil
	case <-b.done:
		return nil, errors.New("chromium closed its DevTools connection")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Navigate opens url.
func (b *Browser) Navigate(ctx context.Context, url string) error {
	_, err := b.call(ctx, "Page.navigate", map[string]any{"url": url})
	return err
}

// Eval evaluates a script expression in the page (awaiting a promise) and
// decodes its value into out.
func (b *Browser) Eval(ctx context.Context, expr string, out any) error {
	res, err := b.call(ctx, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true})
	if err != nil {
		return err
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return err
	}
	if r.Exception != nil {
		return fmt.Errorf("%s: %s %s", expr, r.Exception.Text, r.Exception.Exception.Description)
	}
	if out == nil || len(r.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(r.Result.Value, out)
}

// WaitTrue evaluates expr until it is true.
func (b *Browser) WaitTrue(ctx context.Context, expr string) error {
	for {
		var ok bool
		err := b.Eval(ctx, expr, &ok)
		if err == nil && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last error: %v)", expr, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Log is what chromium printed.
func (b *Browser) Log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.log.String()
}

// Close stops chromium.
func (b *Browser) Close() {
	if b.ws != nil {
		b.ws.Close()
	}
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Kill()
		_ = b.cmd.Wait()
		b.cmd = nil
	}
}
