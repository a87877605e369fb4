"""The simulation itself: advances a scenario second by second, writing its log lines and keeping the state its
/metrics shows. See the package docstring for the timing model."""
from __future__ import annotations

import random
import threading
from datetime import datetime, timedelta

from exporter.simulate import exposition
from exporter.simulate.exposition import ServerState
from exporter.simulate.lines import LineWriter
from exporter.simulate.scenario import Event, Phase, Scenario

PREFILL_EVERY = 5           # seconds between prefill lines
MAX_ACCESS_PER_SECOND = 4   # uvicorn access lines written per simulated second (a sample of completions)
# SGLang's scheduler estimate of the share of max_new_tokens still to come: it starts at 0.7 x
# --schedule-conservativeness, decays each step to a floor of 0.14 x it, and jumps up after a retraction.
NEW_TOKEN_RATIO_INIT = 0.7
NEW_TOKEN_RATIO_MIN = 0.14
NEW_TOKEN_RATIO_DECAY = 0.001   # per simulated second
SPEC_DRAFT_TOKENS = 4           # draft tokens per verify step: accept rate = (accept length - 1) / this


class Simulator:
    """Advances a scenario second by second; see the module docstring for the timing model."""

    def __init__(self, scenario: Scenario, start: datetime | None = None, seed: int = 0, fmt: str | None = None):
        self.scenario = scenario
        self.start = start or datetime(2025, 8, 11, 17, 0, 0)
        self.rng = random.Random(seed)
        self.writer = LineWriter(fmt or scenario.format, scenario.tp, scenario.dp)
        self.family = self.writer.family
        self.args = scenario.server_args
        self.model = self.args.get("served_model_name") or self.args["model_path"]
        self.max_total_num_tokens = 0
        self.metrics = ServerState(scenario.dp)
        self.now = -1            # last simulated second processed
        self._lock = threading.Lock()
        self._retract_acc = 0.0
        self._complete_acc = 0.0
        self._last_tick = 0
        self._ends = []
        t = 0.0
        for p in scenario.phases:
            t += p.duration
            self._ends.append(t)
        self._events: dict[int, list[Event]] = {}
        offset = 0.0
        for p in scenario.phases:
            for ev in p.events:
                self._events.setdefault(int(offset + ev.at), []).append(ev)
            offset += p.duration

    @property
    def duration(self) -> float:
        return self.scenario.duration

    def phase_at(self, second: float) -> Phase:
        for end, p in zip(self._ends, self.scenario.phases):
            if second < end:
                return p
        return self.scenario.phases[-1]

    # ---- public API
    def lines_until(self, t_seconds: float) -> list[str]:
        """Advance simulated time to t_seconds (from the start) and return the new log lines."""
        out: list[str] = []
        with self._lock:
            while self.now + 1 <= t_seconds:
                self.now += 1
                out.extend(self._step(self.now))
        return out

    def metrics_text(self) -> str:
        from prometheus_client import CollectorRegistry, generate_latest
        with self._lock:
            fams = self._families()

        class _C:
            def collect(self_inner):
                return iter(fams)

        reg = CollectorRegistry(auto_describe=False)
        reg.register(_C())
        return generate_latest(reg).decode("utf-8")

    def write_log(self, path, duration: float | None = None) -> int:
        """Write the whole scenario (or `duration` simulated seconds) at once; returns the line count."""
        lines = self.lines_until(self.duration if duration is None else duration)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)
        return len(lines)

    # ---- internals
    def _when(self, second: int) -> datetime:
        return self.start + timedelta(seconds=second)

    def _pick(self, v, integer=False):
        if isinstance(v, tuple):
            lo, hi = v
            if integer:
                return self.rng.randint(int(lo), int(hi))
            return self.rng.uniform(lo, hi)
        return round(v) if integer else float(v)

    def _startup(self, second: int) -> list[str]:
        lines, self.max_total_num_tokens = self.writer.startup(
            self._when(second), self.args, self.scenario.available_gpu_mem_gb, self.scenario.max_total_num_tokens)
        self.metrics = ServerState(self.scenario.dp)   # a new process: counters restart from zero
        self._last_tick = second
        return lines

    def _step(self, s: int) -> list[str]:
        when = self._when(s)
        phase = self.phase_at(s)
        out: list[str] = []
        restarted = s == 0
        if s == 0:
            out.extend(self._startup(s))
        for ev in self._events.get(s, ()):
            if ev.kind == "restart":
                out.extend(self._startup(s))
                restarted = True
            else:
                out.extend(self._event_lines(ev, when))
        if restarted:
            return out
        if phase.silent:
            if s - self._last_tick >= 30 and self.family == "0.5.23":
                for r in self.metrics.ranks:
                    r.throughput = 0.0
            if phase.scheduler_idle:       # no batch to run, the queue gauge as last reported: busy-looking idle
                for r in self.metrics.ranks:
                    r.idle_seconds += 1.0
            return out
        self._last_tick = s
        out.extend(self._tick(s, when, phase))
        return out

    def _event_lines(self, ev: Event, when: datetime) -> list[str]:
        w, out = self.writer, []
        if ev.kind == "watchdog":
            for d in range(w.dp):
                out.append(w.watchdog(when, dp_rank=d, tp_rank=0))
            return out
        if ev.kind == "crash":
            return w.crash(when)
        phase = "prefill" if ev.kind == "oom_prefill" else "decode"
        for d, t in w.ranks():
            if ev.source == "kv_pool":
                out.extend(w.kv_oom(when, phase=phase, requested=self.args["chunked_prefill_size"],
                                    available=self.rng.randint(64, 2048), dp_rank=d, tp_rank=t))
            else:
                out.extend(w.cuda_oom(when, phase=phase, dp_rank=d, tp_rank=t))
        return out

    def _tick(self, s: int, when: datetime, phase: Phase) -> list[str]:
        w, rng, m, out = self.writer, self.rng, self.metrics, []
        mrr = self.args["max_running_requests"]
        graph_max = self.args["cuda_graph_max_bs"]
        lat = phase.latency
        total_running, total_tput = 0, 0.0
        for d in range(w.dp):
            running = min(mrr, self._pick(phase.running, integer=True))
            queue = self._pick(phase.queue, integer=True)
            usage = round(min(1.0, self._pick(phase.token_usage)), 2)
            tokens = round(usage * self.max_total_num_tokens)
            if phase.gen_throughput is None:
                tput = round(running / lat["itl"] * rng.uniform(0.97, 1.03), 2) if running else 0.0
            else:
                tput = round(self._pick(phase.gen_throughput), 2)
            if phase.cuda_graph is None:
                graph = not self.args["disable_cuda_graph"] and running <= graph_max
            else:
                graph = phase.cuda_graph
            if s % PREFILL_EVERY == 0:
                new_seq = rng.randint(1, 8)
                new_token = new_seq * phase.prompt_tokens
                cached = int(new_token * phase.cache_hit_rate)
                out.append(w.prefill(when, new_seq=new_seq, new_token=new_token - cached, cached_token=cached,
                                     token_usage=usage, running=running, queue=queue,
                                     input_throughput=new_token / max(lat["ttft"], 0.05), dp_rank=d, tp_rank=0))
            out.append(w.decode(when, running=running, num_tokens=tokens, token_usage=usage,
                                gen_throughput=tput, queue=queue, cuda_graph=graph, dp_rank=d, tp_rank=0))
            r = m.ranks[d]
            r.running, r.queue, r.usage, r.tokens, r.throughput = running, queue, usage, tokens, tput
            if running == 0 and queue == 0:
                r.idle_seconds += 1.0
            r.hit_rate = phase.cache_hit_rate if self.family == "0.5.23" else 0.0
            self._model_rank(r, phase, running, queue)
            total_running += running
            total_tput += tput
        # retractions: a deterministic rate with random sizes; every TP rank of the DP rank prints them
        self._retract_acc += phase.retractions_per_minute / 60.0
        retracted_now = 0
        for r in m.ranks:
            r.retracted_last = 0      # num_retracted_reqs: retracted since the last report, per scheduler
        while self._retract_acc >= 1.0 - 1e-9:
            self._retract_acc -= 1.0
            n = rng.randint(1, 3)
            before = rng.uniform(0.30, 0.95)
            after = min(1.0, before + 0.3)
            d = rng.randrange(w.dp)
            for t in range(w.tp):
                out.append(w.retraction(when, retracted=n, ratio_before=before, ratio_after=after,
                                        tokens_gained=n * rng.choice((1024, 2048, 4096)), dp_rank=d, tp_rank=t))
            m.retracted += n
            retracted_now += n
            m.ranks[d].retracted_last += n
            m.ranks[d].new_token_ratio = after     # a retraction raises the estimate; it decays from there
        # completions -> request metrics and a sample of uvicorn access lines
        done = total_running / lat["e2e"]
        self._complete_acc += done
        whole = int(self._complete_acc)
        self._complete_acc -= whole
        for _ in range(min(whole, MAX_ACCESS_PER_SECOND)):
            out.append(w.access(when, port=rng.randint(32768, 60999)))
        m.requests += done
        m.prompt_tokens += done * phase.prompt_tokens
        m.cached_tokens += done * phase.prompt_tokens * phase.cache_hit_rate
        # queue wait by Little's law: requests queued / the rate they leave the queue (= the completion rate)
        queued = sum(r.queue for r in m.ranks)
        m.queue_time.observe_many(done, max(0.001, queued / done) if done else 0.001)
        m.generation_tokens += total_tput
        m.ttft.observe_many(done, lat["ttft"])
        m.e2e.observe_many(done, lat["e2e"])
        m.itl.observe_many(total_tput, lat["itl"])
        return out

    def _model_rank(self, r, phase: Phase, running: int, queue: int) -> None:
        """The newer scheduler gauges of a rank, from the scenario model (no random draws: the log stays the
        same whatever the exposition shows)."""
        capacity = self.max_total_num_tokens
        r.capacity = capacity
        free = max(0, capacity - r.tokens)
        # SGLang counts used + available + evictable = capacity; the prefix cache keeps reusable prefixes in the
        # free room in proportion to how much the traffic shares them
        r.kv_evictable = round(free * phase.cache_hit_rate)
        r.kv_available = free - r.kv_evictable
        r.headroom_gb = self.scenario.available_gpu_mem_gb
        floor = NEW_TOKEN_RATIO_MIN * self.args["schedule_conservativeness"]
        start = min(1.0, NEW_TOKEN_RATIO_INIT * self.args["schedule_conservativeness"])
        r.new_token_ratio = start if r.new_token_ratio == 0.0 else max(floor, r.new_token_ratio - NEW_TOKEN_RATIO_DECAY)
        spec = phase.spec_accept_length
        r.spec_accept_length = spec or 0.0
        r.spec_accept_rate = (spec - 1) / SPEC_DRAFT_TOKENS if spec else 0.0
        r.paused = 0        # paused by an async weight update: not simulated
        pd = self._pick(phase.pd_queue, integer=True) if phase.pd_queue else 0
        mode = self.args.get("disaggregation_mode", "null")
        r.pd_prefill_bootstrap = pd if mode == "prefill" else 0
        r.pd_prefill_inflight = pd // 2 if mode == "prefill" else 0
        r.pd_decode_prealloc = pd if mode == "decode" else 0
        r.pd_decode_transfer = pd // 2 if mode == "decode" else 0

    def _labels(self, dp_rank: int | None) -> dict:
        """Label set: scheduler metrics (dp_rank given) or tokenizer metrics (None), per format family."""
        labels = {}
        if dp_rank is not None and self.family in ("0.5.8", "0.5.23") and self.scenario.dp > 1:
            labels["dp_rank"] = str(dp_rank)
        if self.family != "0.3" and (dp_rank is not None or self.family == "0.5.23"):
            labels["engine_type"] = "unified"
        labels["model_name"] = self.model
        if dp_rank is not None and self.family in ("0.5.8", "0.5.23"):
            labels["moe_ep_rank"] = "0"
            labels["pp_rank"] = "0"
            labels["tp_rank"] = "0"
        return labels

    def _families(self):
        return exposition.families(self.family, self.metrics, self._labels, self._labels(None))
