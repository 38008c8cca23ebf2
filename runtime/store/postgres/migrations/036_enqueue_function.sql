-- Queueing a run (store.Catalog.EnqueueRun) is one call, one round trip
-- where it took six (the transaction's begin, the thread's lock, the busy
-- check, the run's insert, the lease, the commit), and the thread's lock
-- is held for the function's work alone. It decides as the shared
-- catalog's EnqueueRun does: under the thread's advisory lock, whether
-- the thread is there and not being deleted, whether it has a queued or
-- running run, and the time of its last run; then, as p_policy says on a
-- busy thread, the run refused ('reject'), queued behind ('enqueue') or
-- queued with the thread's queued runs cancelled and its running one
-- asked to stop ('interrupt'). The run takes a time after its thread's
-- last run's, whatever the clock of the server that queued it said; on a
-- free thread, a run queued for a server (p_server) is claimed by it at
-- once, with the thread's lease when p_lease asks (on the server's clock,
-- as Acquire takes it: an unexpired lease of another owner stays).
--
-- A VOLATILE function's statements each read a snapshot of their own, so
-- the check after the lock sees every run committed before the lock was
-- granted, as a transaction's statement after the lock does.
--
-- outcome: 0 the run is recorded (with created, the time it took, and
-- taken, whether it took the lease), 1 no such thread, 2 refused on a
-- busy thread. A run whose id is taken fails with the unique violation.
CREATE FUNCTION trellis_enqueue_run(
    p_id text, p_tenant text, p_thread text, p_flow text, p_flow_version text, p_input text, p_error text,
    p_checkpoint bigint, p_created bigint, p_finished bigint, p_resume boolean, p_interrupt boolean,
    p_server text, p_stop text, p_answers text, p_config text, p_trace text, p_write_id text,
    p_policy text, p_lease boolean, p_owner text, p_ttl bigint,
    OUT outcome integer, OUT busy boolean, OUT created bigint, OUT taken boolean)
LANGUAGE plpgsql AS $$
DECLARE
    found_thread boolean;
    last bigint;
    v_status text := 'queued';
    v_server text := '';
    v_started bigint := 0;
    n bigint;
BEGIN
    outcome := 0;
    created := p_created;
    taken := false;
    PERFORM pg_advisory_xact_lock(hashtext(p_thread));
    SELECT EXISTS (SELECT 1 FROM api_threads WHERE id = p_thread AND tenant = p_tenant AND NOT deleting),
        EXISTS (SELECT 1 FROM api_runs WHERE thread = p_thread AND status IN ('queued', 'running')),
        (SELECT max(created_at) FROM api_runs WHERE thread = p_thread)
        INTO found_thread, busy, last;
    IF NOT found_thread THEN
        outcome := 1;
        RETURN;
    END IF;
    IF busy THEN
        IF p_policy = 'reject' THEN
            outcome := 2;
            RETURN;
        END IF;
        IF p_policy = 'interrupt' THEN
            UPDATE api_runs SET status = 'cancelled', error = 'interrupted by run ' || p_id, finished_at = p_created
                WHERE thread = p_thread AND status = 'queued';
            UPDATE api_runs SET stop = 'interrupt' WHERE thread = p_thread AND status = 'running' AND stop = '';
        END IF;
    END IF;
    IF last IS NOT NULL AND created <= last THEN
        created := last + 1;
    END IF;
    IF NOT busy AND p_server <> '' THEN
        v_status := 'running';
        v_server := p_server;
        v_started := created;
    END IF;
    INSERT INTO api_runs (id, tenant, thread, flow, flow_version, status, input, error, checkpoint,
        created_at, started_at, finished_at, resume, interrupt, server, stop, answers, config, trace, write_id)
    VALUES (p_id, p_tenant, p_thread, p_flow, p_flow_version, v_status, p_input, p_error, p_checkpoint,
        created, v_started, p_finished, p_resume, p_interrupt, v_server, p_stop, p_answers, p_config, p_trace, p_write_id);
    IF v_status = 'running' AND p_lease THEN
        INSERT INTO leases (thread, owner, expires_at)
        VALUES (p_thread, p_owner, (extract(epoch FROM clock_timestamp()) * 1e9)::bigint + p_ttl)
        ON CONFLICT (thread) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
            WHERE leases.owner = excluded.owner OR leases.expires_at < (extract(epoch FROM clock_timestamp()) * 1e9)::bigint;
        GET DIAGNOSTICS n = ROW_COUNT;
        taken := n > 0;
    END IF;
END
$$;
