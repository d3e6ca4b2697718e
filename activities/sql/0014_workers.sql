-- Worker heartbeats (issue 48): each worker process writes its row every few seconds
-- (workers/observability.py `heartbeating`), the time by the database's clock. Temporal's
-- task-queue description lags behind a worker that froze (a poll stays open for up to a
-- minute), and it knows nothing of a worker's event loop: this row says both within
-- seconds. A worker that stops cleanly deletes its row; a killed one's is forgotten an hour
-- after its last beat.
CREATE TABLE workers (
    identity         text NOT NULL,
    task_queue       text NOT NULL,
    started_at       timestamptz NOT NULL DEFAULT now(),
    last_seen        timestamptz NOT NULL DEFAULT now(),
    loop_lag_seconds double precision NOT NULL DEFAULT 0
                     CONSTRAINT workers_loop_lag_seconds_check CHECK (loop_lag_seconds >= 0),
    PRIMARY KEY (identity, task_queue)
);
