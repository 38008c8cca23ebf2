// Package browser drives Debian's headless Chromium through the DevTools
// protocol, for the tests of the pages the command serves: open a page,
// evaluate script in it, type and press keys as a person would (trusted
// input events, not synthetic DOM events), and take screenshots. What
// the page logs and throws is kept for a failing test to show.
package browser

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Browser is one headless Chromium with one page.
type Browser struct {
	t       testing.TB
	cmd     *exec.Cmd
	ws      *websocket.Conn
	browser string // the browser's own DevTools address
	profile string

	mu      sync.Mutex
	next    int
	pending map[int]chan reply
	log     strings.Builder
	held    []string // the requests Hold holds, by their DevTools id
	done    chan struct{}
	wmu     sync.Mutex
}

type reply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

var devtoolsRE = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// Chromium starts Debian's chromium, headless, with a page of width ×
// height CSS pixels, and any further command-line flags. A machine
// without it fails the test, saying how to install it (make deps does).
func Chromium(t testing.TB, width, height int, flags ...string) *Browser {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: apt-get install chromium (make deps installs it)")
	}
	b := &Browser{t: t, pending: map[int]chan reply{}, done: make(chan struct{}), profile: t.TempDir()}
	args := append([]string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
		"--disable-features=Translate,MediaRouter", "--hide-scrollbars", "--force-device-scale-factor=1",
		fmt.Sprintf("--window-size=%d,%d", width, height),
		"--remote-debugging-port=0", "--user-data-dir=" + b.profile}, flags...)
	b.cmd = exec.Command(bin, append(args, "about:blank")...)
	ownGroup(b.cmd)
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
			if m := devtoolsRE.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
			if !strings.Contains(line, "dbus") {
				b.logf("chromium: %s", line)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	var browserURL string
	select {
	case browserURL = <-found:
		b.browser = browserURL
	case <-time.After(30 * time.Second):
		t.Fatalf("chromium did not open its DevTools port:\n%s", b.Log())
	}
	host := strings.TrimPrefix(browserURL, "ws://")
	host = host[:strings.Index(host, "/")]
	var page string
	for deadline := time.Now().Add(10 * time.Second); page == ""; {
		var targets []struct {
			Type string `json:"type"`
			WS   string `json:"webSocketDebuggerUrl"`
		}
		resp, err := http.Get("http://" + host + "/json/list")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&targets)
			resp.Body.Close()
		}
		for _, tg := range targets {
			if tg.Type == "page" {
				page = tg.WS
			}
		}
		if page == "" && time.Now().After(deadline) {
			t.Fatalf("chromium lists no page: %v", err)
		}
		if page == "" {
			time.Sleep(100 * time.Millisecond)
		}
	}
	b.ws, _, err = websocket.DefaultDialer.Dial(page, nil)
	if err != nil {
		t.Fatal(err)
	}
	go b.read()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, m := range []string{"Runtime.enable", "Page.enable", "Log.enable"} {
		if _, err := b.Call(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Call(ctx, "Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *Browser) logf(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintf(&b.log, format+"\n", args...)
}

func (b *Browser) read() {
	defer close(b.done)
	for {
		var m struct {
			ID     int             `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			reply
		}
		if err := b.ws.ReadJSON(&m); err != nil {
			return
		}
		if m.ID == 0 {
			b.event(m.Method, m.Params)
			continue
		}
		b.mu.Lock()
		ch := b.pending[m.ID]
		delete(b.pending, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m.reply
		}
	}
}

// event keeps what the page says: console messages, exceptions and
// browser log entries.
func (b *Browser) event(method string, params json.RawMessage) {
	switch method {
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		_ = json.Unmarshal(params, &p)
		var parts []string
		for _, a := range p.Args {
			if a.Value != nil {
				parts = append(parts, fmt.Sprint(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		b.logf("console.%s: %s", p.Type, strings.Join(parts, " "))
	case "Runtime.exceptionThrown":
		var p struct {
			Details struct {
				Text      string `json:"text"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
		}
		_ = json.Unmarshal(params, &p)
		b.logf("exception: %s %s", p.Details.Text, p.Details.Exception.Description)
	case "Fetch.requestPaused":
		var p struct {
			RequestID string `json:"requestId"`
		}
		_ = json.Unmarshal(params, &p)
		b.mu.Lock()
		b.held = append(b.held, p.RequestID)
		b.mu.Unlock()
	case "Log.entryAdded":
		var p struct {
			Entry struct {
				Level, Text, URL string
			} `json:"entry"`
		}
		_ = json.Unmarshal(params, &p)
		b.logf("log.%s: %s %s", p.Entry.Level, p.Entry.Text, p.Entry.URL)
	}
}

// Call sends a DevTools command and waits for its result.
func (b *Browser) Call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan reply, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	if params == nil {
		params = map[string]any{}
	}
	b.wmu.Lock()
	err := b.ws.WriteJSON(map[string]any{"id": id, "method": method, "params": params})
	b.wmu.Unlock()
	if err != nil {
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
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// Navigate opens url.
func (b *Browser) Navigate(ctx context.Context, url string) error {
	_, err := b.Call(ctx, "Page.navigate", map[string]any{"url": url})
	return err
}

// Eval evaluates a script expression in the page (awaiting a promise) and
// decodes its value into out.
func (b *Browser) Eval(ctx context.Context, expr string, out any) error {
	res, err := b.Call(ctx, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true, "userGesture": true})
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
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// InsertText types text where the page's focus is, as an input method
// would.
func (b *Browser) InsertText(ctx context.Context, text string) error {
	_, err := b.Call(ctx, "Input.insertText", map[string]any{"text": text})
	return err
}

// keys are the DOM key names Press knows, with their key codes.
var keys = map[string]int{"Backspace": 8, "Tab": 9, "Enter": 13, "Escape": 27, "ArrowLeft": 37, "ArrowUp": 38,
	"ArrowRight": 39, "ArrowDown": 40, "Delete": 46, "Home": 36, "End": 35}

// Press presses and releases a key (a name such as Backspace or Enter),
// with modifiers (1 Alt, 2 Ctrl, 4 Meta, 8 Shift).
func (b *Browser) Press(ctx context.Context, key string, modifiers int) error {
	code, ok := keys[key]
	if !ok {
		return fmt.Errorf("press: unknown key %q", key)
	}
	for _, typ := range []string{"rawKeyDown", "keyUp"} {
		p := map[string]any{"type": typ, "key": key, "code": key, "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code, "modifiers": modifiers}
		if key == "Enter" && typ == "rawKeyDown" {
			// Enter also types a newline: the page sees a keydown then input
			p["type"] = "keyDown"
			p["text"] = "\r"
		}
		if _, err := b.Call(ctx, "Input.dispatchKeyEvent", p); err != nil {
			return err
		}
	}
	return nil
}

// Click presses and releases the mouse at a point of the page.
func (b *Browser) Click(ctx context.Context, x, y float64) error {
	for _, typ := range []string{"mousePressed", "mouseReleased"} {
		if _, err := b.Call(ctx, "Input.dispatchMouseEvent", map[string]any{"type": typ, "x": x, "y": y, "button": "left", "clickCount": 1}); err != nil {
			return err
		}
	}
	return nil
}

// ClickOn clicks the middle of the element a CSS selector finds, as a
// person's mouse would.
func (b *Browser) ClickOn(ctx context.Context, selector string) error {
	var box struct{ X, Y float64 }
	sel, _ := json.Marshal(selector)
	if err := b.Eval(ctx, `(() => { const e = document.querySelector(`+string(sel)+`); if (!e) throw new Error('no element '+`+string(sel)+`);
		e.scrollIntoView({block: 'center', inline: 'center'}); const r = e.getBoundingClientRect(); return {X: r.x + r.width / 2, Y: r.y + r.height / 2}; })()`, &box); err != nil {
		return err
	}
	return b.Click(ctx, box.X, box.Y)
}

// Hold holds the page's requests to the addresses pattern matches (a
// DevTools URL pattern: * any characters, ? one) until release is called,
// as a slow server or network would: what the page shows meanwhile, and
// does when they are answered at last, can be looked at in turn. Held
// tells how many it holds.
func (b *Browser) Hold(ctx context.Context, pattern string) (release func(context.Context) error, err error) {
	if _, err := b.Call(ctx, "Fetch.enable", map[string]any{"patterns": []map[string]any{{"urlPattern": pattern, "requestStage": "Request"}}}); err != nil {
		return nil, err
	}
	letGo := func(ctx context.Context) error {
		b.mu.Lock()
		held := b.held
		b.held = nil
		b.mu.Unlock()
		for _, id := range held {
			// a request the page gave up on meanwhile is not there
			if _, err := b.Call(ctx, "Fetch.continueRequest", map[string]any{"requestId": id}); err != nil && !strings.Contains(err.Error(), "Invalid InterceptionId") {
				return err
			}
		}
		return nil
	}
	return func(ctx context.Context) error {
		if err := letGo(ctx); err != nil {
			return err
		}
		if _, err := b.Call(ctx, "Fetch.disable", nil); err != nil {
			return err
		}
		// any held between the two
		return letGo(ctx)
	}, nil
}

// Held is how many requests Hold holds now.
func (b *Browser) Held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}

// Screenshot writes the page as it looks now to a PNG file.
func (b *Browser) Screenshot(ctx context.Context, path string) error {
	res, err := b.Call(ctx, "Page.captureScreenshot", map[string]any{"format": "png"})
	if err != nil {
		return err
	}
	var r struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return err
	}
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		return err
	}
	return os.WriteFile(path, png, 0o644)
}

// Log is what chromium and the page printed.
func (b *Browser) Log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.log.String()
}

// Profile is the directory of chromium's profile (its history, its
// storage), for a test to read once Quit has written it out.
func (b *Browser) Profile() string { return b.profile }

// Quit closes chromium as a person closing its window would, so that it
// writes out what it keeps in its profile (its history database among
// them), and waits until it has exited.
func (b *Browser) Quit(ctx context.Context) error {
	if b.cmd == nil {
		return nil
	}
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, b.browser, nil)
	if err != nil {
		return fmt.Errorf("quit: %w", err)
	}
	defer ws.Close()
	if err := ws.WriteJSON(map[string]any{"id": 1, "method": "Browser.close"}); err != nil {
		return fmt.Errorf("quit: %w", err)
	}
	exited := make(chan error, 1)
	cmd := b.cmd
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if b.ws != nil {
			b.ws.Close()
		}
		b.cmd = nil
	}()
	select {
	case <-exited:
		kill(cmd) // whatever of its group is left
		return nil
	case <-ctx.Done():
		kill(cmd)
		<-exited
		return fmt.Errorf("quit: chromium did not exit: %w", ctx.Err())
	}
}

// Close stops chromium.
func (b *Browser) Close() {
	if b.ws != nil {
		b.ws.Close()
	}
	if b.cmd != nil && b.cmd.Process != nil {
		kill(b.cmd)
		_ = b.cmd.Wait()
		b.cmd = nil
	}
}
