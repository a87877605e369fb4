"""Week-long SGLang logs of five kinds of deployment, seeded, for tests/test_week_replay.py: busy days, idle nights,
restarts, retractions, queue bursts, health checks, benign warnings, handled request errors, client disconnects,
and a few injected incidents, each labelled with its time span and the paging alerts it should raise.

Batch, start-up, OOM and crash lines come from the simulator's LineWriter (exporter/simulate/lines.py); the
request-error, disconnect and NCCL lines are SGLang's and PyTorch's own strings (sglang 0.4.6, 0.5.2, 0.5.23)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from exporter.simulate.lines import LineWriter

START = datetime(2026, 3, 2, tzinfo=timezone.utc)      # a Monday
DAYS = 7
UVICORN = 'INFO:     10.0.{}.{}:{} - "{} {} HTTP/1.1" {} {}'
REASON = {200: "OK", 400: "Bad Request", 500: "Internal Server Error"}


@dataclass
class Incident:
    name: str
    start: float
    end: float                   # when its evidence is over (recovery, or a window that still holds it)
    pages: frozenset             # the paging alerts' signals it must raise, once each


@dataclass
class WeekLog:
    name: str
    profile: str
    lines: list = field(default_factory=list)
    incidents: list = field(default_factory=list)


class _Writer:
    """Appends lines in time order; `cri` wraps each in a CRI record (containerd's /var/log/containers)."""

    def __init__(self, log: WeekLog, family: str, tp: int = 1, dp: int = 1, cri: bool = False, seed: int = 0):
        self.log, self.w, self.cri = log, LineWriter(family, tp=tp, dp=dp), cri
        self.family = family
        self.rng = random.Random(seed)
        self.args = {"model_path": "meta-llama/Llama-3.1-8B-Instruct", "tp_size": tp, "dp_size": dp,
                     "mem_fraction_static": 0.88, "max_running_requests": 256, "chunked_prefill_size": 8192,
                     "schedule_conservativeness": 1.0, "enable_dp_attention": dp > 1}

    def add(self, when: datetime, *lines: str) -> None:
        if self.cri:
            stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
            self.log.lines.extend(f"{stamp} stderr F {text}" for text in lines)
        else:
            self.log.lines.extend(lines)

    def prefix(self, when: datetime, rank: int | None = None) -> str:
        if rank is None:
            return self.w.prefix(when)
        if self.w.dp > 1:       # DP attention: each GPU is its own scheduler, DPi TPi
            return f"[{when:%Y-%m-%d %H:%M:%S} DP{rank} TP{rank}] "
        return self.w.prefix(when, 0, rank)

    def access(self, when: datetime, method: str = "POST", path: str = "/v1/chat/completions",
               status: int = 200) -> None:
        r = self.rng
        self.add(when, UVICORN.format(r.randrange(256), r.randrange(256), r.randrange(30000, 60000), method, path,
                                      status, REASON.get(status, "")))

    def startup(self, when: datetime) -> None:
        lines, _ = self.w.startup(when, self.args, available_gpu_mem_gb=6.5)
        if self.w.dp > 1:      # the simulator writes a dp x tp grid; DP attention prints DPi TPi
            lines = [text for text in lines if not _off_diagonal(text)]
        self.add(when, *lines)

    def batch(self, when: datetime, queue: int, running: int, usage: float) -> None:
        schedulers = range(self.w.dp) if self.w.dp > 1 else [0]
        for rank in schedulers:
            q = queue // len(schedulers)
            line = self.w.decode(when, running=running, num_tokens=int(usage * 400000), token_usage=usage,
                                 gen_throughput=running * 35.0, queue=q, dp_rank=rank, tp_rank=rank)
            if self.w.dp > 1:
                line = self.prefix(when, rank) + line.split("] ", 1)[1]
            self.add(when, line)

    def retraction(self, when: datetime, rank: int = 0) -> None:
        line = self.w.retraction(when, retracted=1, ratio_before=0.7, ratio_after=0.95)
        self.add(when, self.prefix(when, rank if self.w.dp > 1 else None) + line.split("] ", 1)[1])

    def request_error(self, when: datetime, text: str = "No user query found in messages.") -> None:
        """OpenAIServingBase.handle_request: logger.exception(f"Error in request: {e}"), then the 500."""
        self.add(when, self.prefix(when) + f"Error in request: {text}",
                 "Traceback (most recent call last):",
                 '  File "/sgl/python/sglang/srt/entrypoints/openai/serving_base.py", line 110, in handle_request',
                 "    adapted_request, processed_request = self._convert_to_internal_request(",
                 '  File "/sgl/python/sglang/srt/entrypoints/openai/serving_chat.py", line 188, in _process_messages',
                 f"    raise ValueError(\"{text}\")",
                 f"ValueError: {text}")
        self.access(when, status=500)

    def old_request_error(self, when: datetime, text: str) -> None:
        """0.4.x http_server /generate: logger.error(f"Error: {e}") on a ValueError, answered 400."""
        self.add(when, self.prefix(when) + f"Error: {text}")
        self.access(when, path="/generate", status=400)

    def disconnect(self, when: datetime, rid: str) -> None:
        self.add(when, self.prefix(when) + "[http_server] Error: Request is disconnected from the client side "
                 f"(type 1). Abort request obj.rid='{rid}'")

    def health(self, when: datetime) -> None:
        self.access(when, method="GET", path="/health")

    def benign(self, when: datetime) -> None:
        self.add(when, self.prefix(when) + "LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: 0.1200s | "
                 "# Objects: gen0=10, gen1=20, gen2=30 | This may cause latency jitter. Consider calling the "
                 "freeze_gc API after sending a few warmup requests.",
                 "/usr/lib/python3/dist-packages/torch/cuda/__init__.py:61: FutureWarning: The pynvml package is "
                 "deprecated.")


def _off_diagonal(text: str) -> bool:
    if not text.startswith("[") or " DP" not in text.split("]", 1)[0]:
        return False
    tags = text.split("]", 1)[0].split()
    dp = next((t for t in tags if t.startswith("DP")), None)
    tp = next((t for t in tags if t.startswith("TP")), None)
    return dp is not None and tp is not None and dp[2:] != tp[2:]


def _ts(when: datetime) -> float:
    return when.timestamp()


def _day(d: int, hour: float) -> datetime:
    return START + timedelta(days=d, hours=hour)


def _serve(wr: _Writer, begin: datetime, end: datetime, tick: int, *, queue, requests_per_tick: int = 1,
           errors_per_day: int = 0, retraction_every: int = 0, old_errors: bool = False) -> datetime:
    """Busy hours: a batch line per scheduler each `tick` seconds, POST access lines, now and then a handled
    request error and a retraction; `queue(t, i)` gives the waiting queue. Ends with the queue drained."""
    rng = wr.rng
    ticks = int((end - begin).total_seconds() // tick)
    error_at = set(rng.sample(range(ticks), min(ticks, errors_per_day)))
    for i in range(ticks):
        t = begin + timedelta(seconds=i * tick)
        last = i == ticks - 1
        q = 0 if last else queue(t, i)
        wr.batch(t, q, running=rng.randint(8, 64), usage=rng.uniform(0.3, 0.85))
        for _ in range(requests_per_tick):
            wr.access(t)
        if i in error_at:
            if old_errors:
                wr.old_request_error(t, "The input (9012 tokens) is longer than the model's context length "
                                        "(8192 tokens).")
            else:
                wr.request_error(t)
        if retraction_every and i % retraction_every == retraction_every // 2:
            wr.retraction(t, rng.randrange(max(1, wr.w.dp)))
    return begin + timedelta(seconds=ticks * tick)


def _idle(wr: _Writer, begin: datetime, end: datetime, every: int = 600) -> None:
    """Nights: only health checks (compressed to one every `every` seconds) and a benign warning."""
    t = begin
    while t < end:
        wr.health(t)
        t += timedelta(seconds=every)
    wr.benign(begin + (end - begin) / 2)


def _bursty(rng: random.Random):
    bursts = set()

    def queue(t: datetime, i: int) -> int:
        if i % 90 == 0 and rng.random() < 0.3:
            bursts.update(range(i, i + rng.randint(6, 24)))
        return rng.randint(20, 80) if i in bursts else rng.choice((0, 0, 0, 1, 2))
    return queue


def online_chat(seed: int) -> WeekLog:
    log = WeekLog("online chat (0.5.23)", "online")
    wr = _Writer(log, "0.5.23", seed=seed)
    wr.startup(_day(0, 7.5))
    for d in range(DAYS):
        _idle(wr, _day(d, 0 if d else 7.6), _day(d, 8))
        if d == 3:
            # the injected crash: a scheduler dies mid-afternoon, the pod restarts it three minutes later
            _serve(wr, _day(d, 8), _day(d, 14), 10, queue=_bursty(wr.rng), errors_per_day=2)
            crash = _day(d, 14)
            wr.add(crash, *wr.w.crash(crash))
            back = crash + timedelta(minutes=3)
            wr.startup(back)
            log.incidents.append(Incident("crash", _ts(crash), _ts(back) + 300,
                                          frozenset({"server_crashed"})))
            _serve(wr, back + timedelta(seconds=10), _day(d, 22), 10, queue=_bursty(wr.rng), errors_per_day=2)
        else:
            _serve(wr, _day(d, 8), _day(d, 22), 10, queue=_bursty(wr.rng), errors_per_day=4)
        _idle(wr, _day(d, 22), _day(d, 24))
        if d == 1:
            wr.startup(_day(d, 23.5))        # a planned restart at night
    return log


def dp_attention(seed: int) -> WeekLog:
    log = WeekLog("DP attention 8 GPUs, CRI (0.5.23)", "online")
    wr = _Writer(log, "0.5.23", tp=8, dp=8, cri=True, seed=seed)
    wr.startup(_day(0, 7.5))
    for d in range(DAYS):
        _idle(wr, _day(d, 0 if d else 7.6), _day(d, 8))
        if d == 2:
            _serve(wr, _day(d, 8), _day(d, 15), 20, queue=_bursty(wr.rng), retraction_every=30)
            storm = _day(d, 15)
            # the injected retraction storm: 20 a minute for 12 minutes, across the DP ranks
            for k in range(12 * 20):
                t = storm + timedelta(seconds=3 * k)
                if k % 7 == 0:
                    wr.batch(t, wr.rng.randint(200, 400), running=200, usage=0.99)
                wr.retraction(t, k % 8)
            over = storm + timedelta(minutes=12)
            log.incidents.append(Incident("retraction storm", _ts(storm), _ts(over) + 600,
                                          frozenset({"retraction_storm"})))
            _serve(wr, over, _day(d, 22), 20, queue=_bursty(wr.rng), retraction_every=30)
        else:
            _serve(wr, _day(d, 8), _day(d, 22), 20, queue=_bursty(wr.rng), retraction_every=30)
        _idle(wr, _day(d, 22), _day(d, 24))
        if d == 4:
            wr.startup(_day(d, 23.2))
    return log


def offline_batch(seed: int) -> WeekLog:
    log = WeekLog("offline batch job (0.5.8 format)", "offline")
    wr = _Writer(log, "0.5.8", seed=seed)
    rng = wr.rng
    wr.startup(_day(0, 8.5))

    def deep(t: datetime, i: int) -> int:
        return rng.randint(300, 1900)
    for d in range(DAYS):
        _idle(wr, _day(d, 0 if d else 8.6), _day(d, 9))
        if d == 2:
            # a client killed mid-job: the last batch line shows its queue, its connections abort, then only
            # health checks for 7.5 h
            end = _serve(wr, _day(d, 9), _day(d, 12), 10, queue=deep, requests_per_tick=0)
            wr.batch(end, 1890, running=256, usage=0.88)
            for k in range(64):
                wr.disconnect(end + timedelta(seconds=1 + k // 16), f"{rng.getrandbits(64):016x}")
            _idle(wr, end + timedelta(seconds=30), end + timedelta(hours=7.5), every=60)
        elif d == 4:
            end = _serve(wr, _day(d, 9), _day(d, 11), 10, queue=deep, requests_per_tick=0)
            # the injected decode OOM that takes the scheduler down; the job restarts it four minutes later
            wr.batch(end, 1500, running=256, usage=0.97)
            oom = end + timedelta(seconds=5)
            wr.add(oom, *wr.w.cuda_oom(oom, phase="decode"))
            wr.add(oom, wr.prefix(oom) + "Received sigquit from a child process. It usually means the child "
                   "failed.")
            back = oom + timedelta(minutes=4)
            wr.startup(back)
            log.incidents.append(Incident("decode OOM", _ts(oom), _ts(back) + 16 * 60,
                                          frozenset({"oom_decode", "server_crashed"})))
            _serve(wr, back + timedelta(seconds=10), _day(d, 18), 10, queue=deep, requests_per_tick=0)
        else:
            _serve(wr, _day(d, 9), _day(d, 18), 10, queue=deep, requests_per_tick=0)
        _idle(wr, _day(d, 18) + timedelta(seconds=30), _day(d, 24))
    return log


def long_context(seed: int) -> WeekLog:
    log = WeekLog("long context, TP2 (0.4.7 format)", "long-context")
    wr = _Writer(log, "0.4.7", tp=2, seed=seed)
    wr.startup(_day(0, 7.5))
    for d in range(DAYS):
        _idle(wr, _day(d, 0 if d else 7.6), _day(d, 6))
        if d == 3:
            # the injected NCCL start-up hang: a restart at 06:00 hangs in NCCL init until torch's watchdog
            # kills it after 600 s; the next attempt starts
            hang = _day(d, 6)
            wr.add(hang, wr.w.server_args(hang, wr.args))
            wr.add(hang, *(wr.prefix(hang, t) + "Load weight begin. avail mem=79.10 GB" for t in range(2)))
            killed = hang + timedelta(seconds=600)
            wr.add(killed, f"[rank1]:[E{killed:%m%d %H:%M:%S}.512 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog "
                   "caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, "
                   "NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.")
            back = killed + timedelta(seconds=60)
            wr.startup(back)
            log.incidents.append(Incident("NCCL start-up hang", _ts(hang), _ts(back) + 300,
                                          frozenset({"server_crashed"})))
            _idle(wr, back + timedelta(seconds=30), _day(d, 8))
        else:
            _idle(wr, _day(d, 6), _day(d, 8))
        _serve(wr, _day(d, 8), _day(d, 22), 15, queue=lambda t, i: wr.rng.randint(0, 12), errors_per_day=3)
        _idle(wr, _day(d, 22), _day(d, 24))
    return log


def chat_04(seed: int) -> WeekLog:
    log = WeekLog("0.4 chat server (0.4.7 format)", "online")
    wr = _Writer(log, "0.4.7", seed=seed)
    wr.startup(_day(0, 7.5))
    for d in range(DAYS):
        _idle(wr, _day(d, 0 if d else 7.6), _day(d, 8))
        end = _serve(wr, _day(d, 8), _day(d, 22), 10, queue=_bursty(wr.rng), errors_per_day=5, old_errors=True)
        for _ in range(3):        # streaming clients that went away (0.4.x logs them as "Error: ...")
            wr.add(end, wr.prefix(end) + "Error: Request is disconnected from the client side (type 3). Abort "
                   f"request obj.rid='{wr.rng.getrandbits(64):016x}'")
        _idle(wr, _day(d, 22), _day(d, 24))
        if d == 5:
            wr.startup(_day(d, 23))
    return log


KINDS = (online_chat, dp_attention, offline_batch, long_context, chat_04)
