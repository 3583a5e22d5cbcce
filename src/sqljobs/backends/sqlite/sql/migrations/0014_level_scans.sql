-- next_due now reads the head of each claim level from the claim indexes (one probe a
-- level), so the run_at index it walked is no longer read by anything: dropping it spares
-- every enqueue and every claim an index entry to write.
DROP INDEX sqljobs_jobs_due;
