// Package slurm runs attempts as Slurm batch jobs: each attempt is one job
// named PREFIX-a<attempt ID>, whose batch script runs `srun AGENT agent`, one
// `virga agent` per node of the attempt's gang (package agent), which starts
// the trial processes and speaks to the server over HTTP.
//
// It drives Slurm with its command-line tools (sbatch, squeue, scancel,
// scontrol), not with slurmrestd: slurmrestd is a separate daemon that most
// sites do not run for their users and that wants JWT authentication set up
// by the administrators, while the command-line tools work wherever a user
// can submit a job, with the user's own credentials (munge), against every
// Slurm version in use. The cost is an exec per command; the backend keeps
// the load on slurmctld independent of the number of attempts by asking for
// the state of all of them with one squeue per poll (Stats counts them; an
// squeue is two RPCs, job and partition information: 0.4 RPC/s at the
// default 5 s poll, whether 1 attempt runs or 10,000; bench/slurm).
//
// The lifecycle of an attempt:
//
//   - Start submits the job (sbatch --parsable, the script on stdin) held,
//     and releases it (scontrol release) once sbatch has told its ID: a
//     job whose server died while sbatch ran never runs unless a restarted
//     server adopts its attempt. It submits with
//     --no-requeue: when Slurm preempts a job or loses its node, Virga wants
//     to see it end and to start a new attempt where its own placement
//     policy says, not have Slurm requeue it (a requeued job waits in the
//     queue, on the same partition). A job that Slurm requeued anyway (a
//     site's policy) is cancelled and reported preempted.
//   - The poll (one `squeue --me --states=all` every PollInterval while
//     there are attempts) reports Started once the job runs, and Exited
//     once it has ended: COMPLETED and FAILED with the batch script's exit
//     code; PREEMPTED, NODE_FAIL, BOOT_FAIL, TIMEOUT, DEADLINE, a job with a
//     preemption time, one warned of its time limit, and a requeued one are
//     Preempted, so that the control loop resumes the trial from its
//     checkpoint; a job Slurm no longer knows (it ended longer than
//     MinJobAge ago, or the controller lost it) is Lost.
//   - Stop sends SIGTERM to the job's steps (scancel --signal=TERM: the
//     agents, never srun or the batch shell, which would kill the steps at
//     once), and SIGKILL to the whole job after the grace (scancel
//     --signal=KILL --full). A job still pending is cancelled at once.
//   - A time limit (the attempt's Timeout plus its StopGrace and a minute,
//     rounded up to whole minutes, capped by the pool's TimeLimit) is a backstop for the
//     control loop's own timeout and the partition's MaxTime: Slurm signals
//     the batch shell (--signal=B:USR1@grace), which marks the job (its
//     Comment) and sends SIGTERM to the steps, so that the trial can save a
//     checkpoint before Slurm kills it.
//   - Adopt finds the job of an attempt by name in the next poll (and
//     releases it if it is still held); a restarted server thus needs the
//     same JobPrefix.
//   - Orphans: a job with the prefix whose attempt is not watched, of an
//     attempt that ended here (found lost before its job reached Slurm)
//     or, once AdoptedAll was called, of any attempt, is cancelled by the
//     poll that finds it. A lost attempt's Exited carries the last poll
//     that saw its job run (LastSeen), up to which it is billed.
//
// Requirements on the cluster: the `virga` binary at AgentPath on every
// node; the attempt's directory (StartSpec.Dir, where output.log goes),
// or Config.OutputDir, at the same path on the nodes (a shared file system);
// the server's report URL reachable from the nodes; and the nodes of a gang
// able to reach each other (the first is the rendezvous address).
package slurm
