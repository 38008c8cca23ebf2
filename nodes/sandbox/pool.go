package sandbox

import (
	"context"
	"errors"
	"sync"
)

// Pool bounds the executions that run at once on a backend, across every
// run and thread of a process. Callers wait their turn in the order they
// came, give up their place when their context ends, and the queue's
// depth is observable.
type Pool struct {
	b      Backend
	images Images

	mu      sync.Mutex
	running int
	limit   int
	queue   []chan struct{} // waiters, oldest first
	closed  bool
}

// NewPool runs at most n executions of b at once (n < 1: 1).
func NewPool(b Backend, n int, images Images) *Pool {
	return &Pool{b: b, limit: max(n, 1), images: images}
}

// Backend returns the pool's backend.
func (p *Pool) Backend() Backend { return p.b }

// Stats reports the executions running and waiting.
func (p *Pool) Stats() (running, queued int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running, len(p.queue)
}

// errClosed says the pool was closed.
var errClosed = errors.New("the sandbox pool is closed")

// Start opens an execution's sandbox once a place is free; closing the
// session gives the place back.
func (p *Pool) Start(ctx context.Context, s Spec) (Session, error) {
	if err := p.acquire(ctx); err != nil {
		return nil, err
	}
	sess, err := p.b.Start(ctx, s)
	if err != nil {
		p.release()
		return nil, err
	}
	return &pooled{Session: sess, p: p}, nil
}

// pooled is a session holding a place in its pool.
type pooled struct {
	Session
	p    *Pool
	once sync.Once
}

func (s *pooled) Close() error {
	err := s.Session.Close()
	s.once.Do(s.p.release)
	return err
}

// Exec runs a job, an execution of one process, once a place is free.
func (p *Pool) Exec(ctx context.Context, j *Job) (*Outcome, error) {
	s, err := p.Start(ctx, Spec{Image: j.Image, Root: j.Root, Limits: j.Limits})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Run(ctx, &Proc{Command: j.Command, Stdin: j.Stdin})
}

func (p *Pool) acquire(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errClosed
	}
	if p.running < p.limit && len(p.queue) == 0 {
		p.running++
		p.mu.Unlock()
		return nil
	}
	turn := make(chan struct{})
	p.queue = append(p.queue, turn)
	p.mu.Unlock()
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, w := range p.queue {
			if w == turn {
				p.queue = append(p.queue[:i], p.queue[i+1:]...)
				return ctx.Err()
			}
		}
		// the place was handed over as ctx ended: pass it on
		p.running--
		p.handOver()
		return ctx.Err()
	}
}

func (p *Pool) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running--
	p.handOver()
}

// handOver gives free places to the oldest waiters; p.mu is held.
func (p *Pool) handOver() {
	for p.running < p.limit && len(p.queue) > 0 {
		w := p.queue[0]
		p.queue = p.queue[1:]
		p.running++
		close(w)
	}
}

// Close closes the backend, which ends the executions still running; no
// execution starts after it.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	// the waiters go on to find the backend closed
	for _, w := range p.queue {
		p.running++
		close(w)
	}
	p.queue = nil
	p.mu.Unlock()
	return p.b.Close()
}
