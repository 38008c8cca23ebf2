package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

// Docker runs each job in a container of its own on a Docker engine (the
// one DOCKER_HOST names): no network, a read-only root, a small tmpfs
// workspace, every capability dropped, no new privileges, an unprivileged
// user, memory with no swap, a process count and a CPU share; it is
// killed and removed at the wall limit, when the job's context ends, or
// when the job ends. The container's first process only waits; the job
// runs beside it (an exec), so that its memory and CPU can be read from
// the container once it ends.
type Docker struct {
	cli     *client.Client
	runtime string // "" or runsc
	// Warm is how many started containers to keep ready for each image
	// and set of limits once one has been asked for (0: none). A job
	// takes one instead of creating and starting its own, and a
	// replacement is started in the background; a container still runs
	// one job only.
	Warm int

	mu      sync.Mutex
	live    map[string]bool     // containers not yet removed
	spares  map[string][]string // started containers ready, by key
	filling map[string]int      // spares being started, by key
	closed  bool
	wg      sync.WaitGroup
}

// label marks the containers of this backend, so that leftovers are found.
const label = "trellis.sandbox"

// NewDocker connects to the engine from the environment (DOCKER_HOST);
// runtime is an OCI runtime to run containers with ("": the engine's
// default; runsc for gVisor).
func NewDocker(runtime string) (*Docker, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	return &Docker{cli: cli, runtime: runtime, live: map[string]bool{}, spares: map[string][]string{}, filling: map[string]int{}}, nil
}

// Name implements Backend.
func (d *Docker) Name() string { return "docker" }

// Close implements Backend: the warm containers are removed.
func (d *Docker) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.wg.Wait()
	d.mu.Lock()
	var ids []string
	for _, list := range d.spares {
		ids = append(ids, list...)
	}
	d.spares = map[string][]string{}
	d.mu.Unlock()
	for _, id := range ids {
		d.remove(context.Background(), id)
	}
	return d.cli.Close()
}

// container returns a started container for a job: a warm one, or a new
// one; either way a replacement is started for the next job.
func (d *Docker) container(ctx context.Context, image string, lim Limits) (string, error) {
	if image == "" {
		image = DefaultImage
	}
	key := image + fmt.Sprint(lim)
	d.mu.Lock()
	var id string
	if list := d.spares[key]; len(list) > 0 {
		id, d.spares[key] = list[0], list[1:]
	}
	for !d.closed && len(d.spares[key])+d.filling[key] < d.Warm {
		d.filling[key]++
		d.wg.Add(1)
		go d.fill(key, image, lim)
	}
	d.mu.Unlock()
	if id != "" {
		return id, nil
	}
	id, err := d.create(ctx, image, lim)
	if err != nil {
		return "", err
	}
	if err := d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		d.remove(ctx, id)
		return "", fmt.Errorf("starting the sandbox container: %w", err)
	}
	return id, nil
}

// fill starts a spare container.
func (d *Docker) fill(key, image string, lim Limits) {
	defer d.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := d.create(ctx, image, lim)
	if err == nil {
		if err = d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
			d.remove(ctx, id)
		}
	}
	d.mu.Lock()
	d.filling[key]--
	if err == nil {
		d.spares[key] = append(d.spares[key], id)
	}
	d.mu.Unlock()
}

// Check implements Backend: the engine answers, and the image is there.
func (d *Docker) Check(ctx context.Context) (*Check, error) {
	c := &Check{Backend: "docker", Isolation: "a container per execution: no network, read-only root, tmpfs workspace, no capabilities, no new privileges, unprivileged user, memory, process and CPU limits"}
	v, err := d.cli.ServerVersion(ctx)
	if err != nil {
		return c, fmt.Errorf("the Docker engine does not answer (DOCKER_HOST=%s): %w", d.cli.DaemonHost(), err)
	}
	c.Details = append(c.Details, fmt.Sprintf("engine %s (API %s) at %s", v.Version, v.APIVersion, d.cli.DaemonHost()))
	if d.runtime != "" {
		c.Details = append(c.Details, "runtime "+d.runtime)
		c.Isolation += "; gVisor" + map[bool]string{true: "", false: " (" + d.runtime + ")"}[d.runtime == "runsc"]
	}
	return c, nil
}

// CheckImage reports whether the engine has image.
func (d *Docker) CheckImage(ctx context.Context, image string) error {
	if _, err := d.cli.ImageInspect(ctx, image); err != nil {
		return fmt.Errorf("image %s: %w (build it with make sandbox-image)", image, err)
	}
	return nil
}

// Exec implements Backend.
func (d *Docker) Exec(ctx context.Context, j *Job) (*Outcome, error) {
	lim := j.Limits.withDefaults()
	wctx, cancel := context.WithTimeout(ctx, lim.Wall)
	defer cancel()
	// the container is removed whatever happens to ctx
	bg := context.WithoutCancel(ctx)
	id, err := d.container(bg, j.Image, lim)
	if err != nil {
		return nil, err
	}
	defer d.discard(id)
	ex, err := d.cli.ContainerExecCreate(bg, id, container.ExecOptions{
		User: "65534:65534", WorkingDir: "/work", Cmd: j.Command,
		Env:         []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/work", "LANG=C.UTF-8", "TMPDIR=/work"},
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return nil, fmt.Errorf("the sandbox job: %w", err)
	}
	att, err := d.cli.ContainerExecAttach(bg, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("attaching to the sandbox job: %w", err)
	}
	defer att.Close()
	start := time.Now()
	go func() {
		_, _ = att.Conn.Write(j.Stdin)
		_ = att.CloseWrite()
	}()
	stdout, stderr := &capped{n: lim.Output}, &capped{n: lim.Output}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, att.Reader)
		copied <- err
	}()
	select {
	case <-copied:
	case <-wctx.Done():
		// the wall limit, or the caller gave up: the container dies
		// with everything in it
		_ = d.cli.ContainerKill(bg, id, "KILL")
		att.Close()
		<-copied
	}
	o := &Outcome{Wall: time.Since(start), Exit: -1}
	ins, err := d.inspectExec(bg, ex.ID)
	if err == nil && !ins.Running {
		o.Exit = ins.ExitCode
		if o.Exit > 128 && o.Exit < 128+32 {
			o.Exit, o.Signal = -1, signalName(ins.ExitCode-128)
		}
	}
	d.measure(bg, id, o)
	o.Stdout, o.Stderr, o.StdoutCut, o.StderrCut = stdout.buf, stderr.buf, stdout.cut, stderr.cut
	switch {
	case ctx.Err() != nil:
		return o, ctx.Err()
	case wctx.Err() != nil:
		o.Limit, o.Exit, o.Signal = LimitWall, -1, "SIGKILL"
	default:
		o.attribute(lim)
	}
	return o, nil
}

// inspectExec waits briefly for the engine to record the job's end.
func (d *Docker) inspectExec(ctx context.Context, id string) (container.ExecInspect, error) {
	for i := 0; ; i++ {
		ins, err := d.cli.ContainerExecInspect(ctx, id)
		if err != nil || !ins.Running || i == 50 {
			return ins, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (d *Docker) create(ctx context.Context, image string, lim Limits) (string, error) {
	cpu := max(int64(lim.CPU/time.Second), 1)
	hc := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		Tmpfs: map[string]string{
			"/work": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", lim.Workspace),
			"/tmp":  "rw,nosuid,nodev,noexec,size=1m,mode=1777",
		},
		CapDrop:     []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges"},
		Runtime:     d.runtime,
		Resources: container.Resources{
			Memory: lim.Memory, MemorySwap: lim.Memory,
			PidsLimit: ptr(int64(lim.Processes)),
			NanoCPUs:  1e9,
			Ulimits: []*container.Ulimit{
				{Name: "cpu", Soft: cpu, Hard: cpu + 1},
				{Name: "fsize", Soft: lim.FileSize, Hard: lim.FileSize},
				{Name: "core", Soft: 0, Hard: 0},
				{Name: "nofile", Soft: 256, Hard: 256},
			},
		},
	}
	cfg := &container.Config{
		Image: image, User: "65534:65534", WorkingDir: "/work",
		Cmd:             []string{"/bin/sleep", "86400"},
		NetworkDisabled: true, Labels: map[string]string{label: "1"},
		Env: []string{"PATH=/usr/bin:/bin"},
	}
	resp, err := d.cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		return "", fmt.Errorf("creating the sandbox container: %w", err)
	}
	d.mu.Lock()
	d.live[resp.ID] = true
	d.mu.Unlock()
	return resp.ID, nil
}

// measure reads the container's peak memory, CPU time and memory limit
// hits while it still stands: from its cgroups when the engine runs on
// this machine, else from the engine's statistics (which wait for the
// engine's next sample, up to a second).
func (d *Docker) measure(ctx context.Context, id string, o *Outcome) {
	if d.measureCgroup(id, o) {
		return
	}
	st, err := d.cli.ContainerStatsOneShot(ctx, id)
	if err != nil {
		return
	}
	defer st.Body.Close()
	var s container.StatsResponse
	if json.NewDecoder(st.Body).Decode(&s) != nil {
		return
	}
	o.Memory = int64(s.MemoryStats.MaxUsage)
	o.CPU = time.Duration(s.CPUStats.CPUUsage.TotalUsage)
	m := s.MemoryStats
	// the peak reached the limit: the kernel killed a process of the job
	// to stay under it (the engine's OOMKilled covers its first only)
	if m.Failcnt > 0 || m.Limit > 0 && m.MaxUsage >= m.Limit {
		o.Limit = LimitMemory
	}
}

// measureCgroup reads a local engine's cgroups of the container (v1 with
// the cgroupfs driver, or v2): false when they are not there.
func (d *Docker) measureCgroup(id string, o *Outcome) bool {
	v1 := filepath.Join(cgroupRoot, "memory", "docker", id)
	if _, err := os.Stat(v1); err == nil {
		g := &jobGroup{c: &cgroups{version: "v1"}, dirs: map[string]string{"memory": v1,
			"pids": filepath.Join(cgroupRoot, "pids", "docker", id), "cpuacct": filepath.Join(cgroupRoot, "cpuacct", "docker", id)}}
		g.measure(o)
		return true
	}
	for _, v2 := range []string{filepath.Join(cgroupRoot, "system.slice", "docker-"+id+".scope"), filepath.Join(cgroupRoot, "docker", id)} {
		if _, err := os.Stat(filepath.Join(v2, "memory.peak")); err == nil {
			g := &jobGroup{c: &cgroups{version: "v2"}, dirs: map[string]string{"": v2}}
			g.measure(o)
			return true
		}
	}
	return false
}

// discard kills a job's container at once, with whatever it left
// running, and removes it in the background.
func (d *Docker) discard(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	// a container that is not running any more is a conflict
	if err := d.cli.ContainerKill(ctx, id, "KILL"); err != nil && !cerrdefs.IsConflict(err) {
		d.remove(ctx, id)
		cancel()
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer cancel()
		d.remove(ctx, id)
	}()
}

func (d *Docker) remove(ctx context.Context, id string) {
	for i := range 3 {
		err := d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
		if err == nil || cerrdefs.IsNotFound(err) {
			break
		}
		time.Sleep(time.Duration(i+1) * 100 * time.Millisecond)
	}
	d.mu.Lock()
	delete(d.live, id)
	d.mu.Unlock()
}

// Leftovers lists the containers with this backend's label that still
// exist, but for its warm ones (none, once every job has ended).
func (d *Docker) Leftovers(ctx context.Context) ([]string, error) {
	d.wg.Wait() // spares being started
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", label))})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	spare := map[string]bool{}
	for _, l := range d.spares {
		for _, id := range l {
			spare[id] = true
		}
	}
	var ids []string
	for _, c := range list {
		if !spare[c.ID] {
			ids = append(ids, c.ID)
		}
	}
	return ids, nil
}

func ptr[T any](v T) *T { return &v }
