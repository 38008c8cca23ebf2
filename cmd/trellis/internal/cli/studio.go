package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/trellisflow/trellis/cmd/trellis/internal/page"
	"github.com/trellisflow/trellis/cmd/trellis/internal/speech"
	"github.com/trellisflow/trellis/cmd/trellis/internal/studio"
	"github.com/trellisflow/trellis/runtime/api/mcpserver"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
)

// studioTokenTTL is how long the address `trellis studio` prints signs in.
const studioTokenTTL = 12 * time.Hour

// cmdStudio serves the flows of a directory with the studio on loopback,
// and prints (and opens) a sign-in file whose one-time token signs the
// page in with a key of its own, revoked when the studio stops.
func cmdStudio(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "studio")
	storeAddr := storeFlag(fs)
	addr := fs.String("addr", "127.0.0.1:0", "address to listen on (0: any free port); anything but loopback lets others on the network reach the studio")
	tenant := fs.String("tenant", "studio", "the tenant the studio's threads belong to")
	noOpen := fs.Bool("no-open", false, "print the address without opening a browser")
	verbose := fs.Bool("verbose", false, "log every request on standard error")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 1 {
		return fail(env, "studio", usagef("one flows directory at most, got %d", len(pos)))
	}
	flows := "flows"
	if len(pos) == 1 {
		flows = pos[0]
	}
	if info, err := os.Stat(flows); err != nil || !info.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return fail(env, "studio", usagef("flows directory %s: %v", flows, unwrapPath(err)))
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
	rt, err := openRuntime(ctx, *storeAddr)
	if err != nil {
		return fail(env, "studio", err)
	}
	defer rt.Close()
	// an editor's every change is checked (loaded, with the kinds reaching
	// nothing): the flow format stays
	defer flow.Prepare(kind.OfflineOf(env.Registry))()
	sp := speech.NewOffline()
	defer sp.Close()
	srv, err := server.New(server.Config{Runtime: rt, FlowsDir: flows, Kinds: env.Registry, Logger: log,
		StopTimeout: 10 * time.Second, Speech: sp, Page: page.Handler(), Studio: studio.Handler(), Metrics: SandboxMetrics(), Evals: serverEvals(), MCP: mcpserver.New})
	if err != nil {
		return fail(env, "studio", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fail(env, "studio", err)
	}
	token, err := srv.StudioToken(*tenant, studioTokenTTL)
	if err != nil {
		ln.Close()
		return fail(env, "studio", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.RevokeStudioKeys(rctx); err != nil {
			fmt.Fprintf(env.Stderr, "trellis studio: %v\n", err)
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		fmt.Fprintf(env.Stderr, "trellis studio: listening on %s, beyond loopback: whoever reaches it can sign in with the address below until it is used\n", ln.Addr())
		if ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1"
		}
	}
	base := "http://" + net.JoinHostPort(host, port)
	file, remove, err := writeSignInFile(base, token)
	if err != nil {
		ln.Close()
		return fail(env, "studio", err)
	}
	defer remove()
	// the file goes once its token is spent: the browser has read it
	go func() {
		select {
		case <-srv.StudioTokenSpent(token):
			remove()
		case <-ctx.Done():
		}
	}()
	fmt.Fprintf(env.Stdout, "Trellis Studio: the flows of %s, threads in %s (tenant %s), at %s/studio.\n"+
		"Open this file in a browser; it signs the studio in once (Ctrl-C stops the studio):\n\n    %s\n\n"+
		"From another browser, sign in at the address above with this one-time token instead: %s\n\n",
		flows, shownStore(*storeAddr), *tenant, base, file, token)
	if !*noOpen {
		openBrowser(file, env.Stderr)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			_ = srv.Reload()
		}
	}()
	if err := srv.Serve(ctx, ln); err != nil {
		return fail(env, "studio", err)
	}
	return 0
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// openBrowser asks the desktop to open url, when there is one; the
// address is printed either way.
func openBrowser(url string, stderr io.Writer) {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
			return
		}
		cmd = exec.Command("xdg-open", url)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "trellis studio: could not open a browser (%v): open the address yourself\n", err)
		return
	}
	go func() { _ = cmd.Wait() }()
}

// signInPage is the file `trellis studio` opens: a form that posts the
// one-time token to the studio as soon as it loads (or when its button is
// pressed), so that the token is in no address the browser opens and so
// in none its history keeps.
var signInPage = template.Must(template.New("signin").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<title>Trellis Studio: signing in</title>
</head>
<body onload="document.forms[0].submit()">
<form method="post" action="{{.Action}}">
<input type="hidden" name="token" value="{{.Token}}">
<p>Signing in to Trellis Studio at {{.Base}}… <button type="submit">Sign in</button></p>
</form>
</body>
</html>
`))

// writeSignInFile writes the sign-in page to a file only its user can
// read, in a directory of its own, and returns the file's address and
// what removes it (safe to call more than once).
func writeSignInFile(base, token string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "trellis-studio-")
	if err != nil {
		return "", nil, fmt.Errorf("sign-in file: %w", err)
	}
	var once sync.Once
	remove := func() { once.Do(func() { _ = os.RemoveAll(dir) }) }
	var b bytes.Buffer
	if err := signInPage.Execute(&b, map[string]string{"Action": base + "/studio/signin", "Base": base, "Token": token}); err != nil {
		remove()
		return "", nil, fmt.Errorf("sign-in file: %w", err)
	}
	name := filepath.Join(dir, "sign-in.html")
	if err := os.WriteFile(name, b.Bytes(), 0o600); err != nil {
		remove()
		return "", nil, fmt.Errorf("sign-in file: %w", err)
	}
	p := filepath.ToSlash(name)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a drive's name
	}
	return (&url.URL{Scheme: "file", Path: p}).String(), remove, nil
}
