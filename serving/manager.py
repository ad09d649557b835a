"""Loaded models: load, reload, unload and look up versions, with hot swap and draining.

Loading (or reloading) a model builds the new versions next to the old ones, then swaps the
version table in one step; requests already holding an old version finish on it, and the old
versions are closed only after they drained. Unloading removes the model from the table first
(new requests get NOT_FOUND) and then drains. So neither drops a request in flight or in a queue.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Awaitable, Callable

from lite.engines.ort import thread_pools
from lite.errors import EngineUnavailableError

from .errors import InvalidRequestError, ModelLoadError, ModelNotFoundError, ServingError
from .metrics import Metrics
from .model import ServedModel
from .repository import ModelRepository, ModelSource, check_model_name
from .settings import Settings
from .types import ModelIndexEntry
from .versions import MAX_DIGITS, parse_version, shown

log = logging.getLogger("serving.manager")


class ModelManager:
    def __init__(self, repository: ModelRepository, settings: Settings, metrics: Metrics) -> None:
        self.repository = repository
        self.settings = settings
        self.metrics = metrics
        self._models: dict[str, dict[int, ServedModel]] = {}
        self._failures: dict[str, str] = {}  # model -> why its last load failed
        self._unloaded: set[str] = set()
        # Polling: each model's files as the last poll saw them, and the files a load failed on.
        self._seen: dict[str, dict] = {}
        self._failed_on: dict[str, dict] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._closing: set[asyncio.Task] = set()
        self._poller: asyncio.Task | None = None
        # Told when a model becomes servable (True) or stops being so (False): the health service.
        self.on_change: Callable[[str, bool], Awaitable[None]] | None = None

    # ----- lookup ---------------------------------------------------------------------------------

    def get(self, name: str, version: str = "") -> ServedModel:
        """The requested version, or the newest one when ``version`` is empty."""
        versions = self._models.get(name)
        if not versions:
            check_model_name(name)
            hint = ""
            if name in self._failures:
                hint = f" (its last load failed: {self._failures[name]})"
            elif name in self._unloaded:
                hint = " (it was unloaded)"
            raise ModelNotFoundError(f"model {name!r} is not loaded{hint}")
        if not version:
            return versions[max(versions)]
        number = parse_version(version)
        if number is None:
            raise InvalidRequestError(
                f"model {name!r}: version {shown(version)} is not a positive integer of 1 to {MAX_DIGITS} ASCII "
                "digits; give one (e.g. '1'), or leave it empty for the newest version"
            )
        try:
            return versions[number]
        except KeyError:
            raise ModelNotFoundError(
                f"model {name!r} has no version {version}; loaded versions: {sorted(versions)}"
            ) from None

    def versions(self, name: str) -> list[ServedModel]:
        self.get(name)
        return [self._models[name][v] for v in sorted(self._models[name])]

    def loaded(self) -> list[ServedModel]:
        return [versions[v] for name in sorted(self._models) for versions in [self._models[name]]
                for v in sorted(versions)]

    def index(self, ready_only: bool) -> list[ModelIndexEntry]:
        """Every loaded version with its state, then (unless ``ready_only``) the repository's models
        that are not loaded, UNAVAILABLE with the reason. A loaded model whose last reload failed
        keeps serving the versions it had: they stay READY, with the failure as their reason."""
        entries = [ModelIndexEntry(m.name, m.version, m.state, self._stale_reason(m.name)) for m in self.loaded()]
        if ready_only:
            return [e for e in entries if e.state == "READY"]
        for name in self.repository.model_names():
            if name not in self._models:
                reason = self._failures.get(name, "unloaded" if name in self._unloaded else "not loaded")
                entries.append(ModelIndexEntry(name, "", "UNAVAILABLE", reason))
        return sorted(entries, key=lambda e: (e.name, e.version))

    def _stale_reason(self, name: str) -> str:
        failure = self._failures.get(name)
        if failure is None:
            return ""
        return f"the last reload failed, the versions loaded before keep serving: {failure}"

    # ----- load / unload ------------------------------------------------------------------------

    async def load(self, name: str) -> None:
        """Load the model, or reload it: versions whose file and config are unchanged are kept."""
        check_model_name(name)
        if name not in self._models:
            # A name with no directory in the repository gets no lock and no recorded failure:
            # both are kept per name, and a client can send any number of names.
            await asyncio.to_thread(self.repository.model_dir, name)
        async with self._lock(name):
            try:
                source = await asyncio.to_thread(self.repository.source, name)
                await self._install(source)
            except ServingError as err:
                self._failures[name] = str(err)
                log.error("model %s: load failed: %s", name, err)
                raise
            except Exception as err:  # a defect or an exhausted resource in one model never stops the others
                failure = ModelLoadError(f"model {name}: load failed: {type(err).__name__}: {str(err)[:500]}")
                self._failures[name] = str(failure)
                log.error("model %s: load failed", name, exc_info=err)
                raise failure from err
            self._failures.pop(name, None)
            self._unloaded.discard(name)

    async def unload(self, name: str) -> None:
        check_model_name(name)
        # A name that was never loaded gets no lock (one is kept per name); one being loaded has one.
        if name not in self._models and name not in self._locks:
            raise ModelNotFoundError(f"model {name!r} is not loaded")
        async with self._lock(name):
            versions = self._models.pop(name, None)
            if versions is None:
                raise ModelNotFoundError(f"model {name!r} is not loaded")
            self._unloaded.add(name)
            self._update_gauge()
            await self._notify(name, False)
            log.info("model %s: unloading versions %s", name, sorted(versions))
            await asyncio.gather(*(m.close(self.settings.grace_period_s) for m in versions.values()))

    async def _install(self, source: ModelSource) -> None:
        old = self._models.get(source.name, {})
        fresh: dict[int, ServedModel] = {}
        kept: dict[int, ServedModel] = {}
        try:
            for version, path in source.versions.items():
                stamp = (_file_stamp(path), source.config)
                current = old.get(version)
                if current is not None and current.stamp == stamp:
                    kept[version] = current
                    continue
                fresh[version] = await asyncio.to_thread(self._load_version, source, version, path, stamp)
        except BaseException:
            for model in fresh.values():
                await model.close(0)
            raise
        for model in fresh.values():
            model.start()
        self._models[source.name] = {**kept, **fresh}
        self._update_gauge()
        await self._notify(source.name, True)
        retired = [m for v, m in old.items() if kept.get(v) is not m]
        log.info("model %s: serving versions %s (new %s)", source.name, sorted(self._models[source.name]),
                 sorted(fresh))
        for model in retired:  # drain in the background; the swap above already took effect
            task = asyncio.get_running_loop().create_task(model.close(self.settings.grace_period_s))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _load_version(self, source: ModelSource, version: int, path, stamp: tuple) -> ServedModel:
        config = source.config
        if config.threads is not None and thread_pools.sharing():
            log.warning("model %s: threads=%d of its config.json does not apply: the models share ONNX Runtime's "
                        "thread pool of the process (--ort-thread-pools session gives each model a pool of its own)",
                        source.name, config.threads)
        return ServedModel.load(
            source.name, version, path, config,
            device=config.device or self.settings.device,
            instances=config.instance_count or self.settings.instance_count,
            threads=config.threads if config.threads is not None else self.settings.threads,
            max_queue_size=config.max_queue_size or self.settings.max_queue_size,
            metrics=self.metrics,
            inline_us=self.settings.inline_execution_us,
            stamp=stamp,
            memory_map=self.settings.map_model_files,
        )

    # ----- startup, polling, shutdown ------------------------------------------------------------

    async def load_startup_models(self) -> list[str]:
        """Load the configured models (default: all); the names that failed."""
        self._share_onnxruntime_threads()
        names = list(self.settings.models) or self.repository.model_names()
        failed = []
        for name in names:
            try:
                await self.load(name)
            except ServingError as err:
                failed.append(name)
                if name not in self._failures:  # refused before loading began (a bad name, no folder)
                    log.error("model %s: not loaded at startup: %s", name, err)
        return failed

    def _share_onnxruntime_threads(self) -> None:
        """With ``ort_thread_pools`` "shared", before any model loads: every ONNX Runtime session
        of the process runs on ONNX Runtime's one pool (lite.engines.ort.thread_pools), instead of
        a pool per model's session, its worker threads idle between requests."""
        if self.settings.ort_thread_pools != "shared" or importlib.util.find_spec("onnxruntime") is None:
            return
        try:
            thread_pools.share_threads(self.settings.threads or None)
        except EngineUnavailableError as err:
            log.warning("ONNX Runtime's thread pools stay one per model: %s", err)

    def start_polling(self) -> None:
        if self.settings.poll_interval_s > 0:
            self._poller = asyncio.get_running_loop().create_task(self._poll(), name="repository poll")

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.settings.poll_interval_s)
            try:
                await self.poll_once()
            except Exception:  # a poll must never kill the server; the next one retries
                log.exception("repository poll failed")

    async def poll_once(self) -> None:
        """Load new models, reload changed ones, unload the ones gone from the repository."""
        present = set(await asyncio.to_thread(self.repository.model_names))
        for gone in (set(self._seen) | set(self._failed_on)) - present:
            self._seen.pop(gone, None)
            self._failed_on.pop(gone, None)
        for name in sorted(set(self._models) - present):
            await self.unload(name)
        for name in sorted(present):
            if name in self._unloaded and name not in self._models:
                continue  # explicitly unloaded: polling does not bring it back
            try:
                source = await asyncio.to_thread(self.repository.source, name)
            except ServingError as err:
                self._failures[name] = str(err)
                continue
            current = self._models.get(name, {})
            stamps = {v: (_file_stamp(p), source.config) for v, p in source.versions.items()}
            if {v: m.stamp for v, m in current.items()} == stamps:
                self._seen.pop(name, None)
                continue
            await self._reload_settled(name, stamps)

    async def _reload_settled(self, name: str, stamps: dict) -> None:
        """Reload ``name`` whose files differ from the loaded ones, once they are as the last poll
        saw them: a file still being written in place (``rsync --inplace``, ``dd conv=notrunc``)
        keeps the size it had and may pass verification half old, half new. Files a load already
        failed on are not read again until they change (a broken model logged its error at every
        poll, forever)."""
        settled = self._seen.get(name) == stamps
        self._seen[name] = stamps
        if not settled or self._failed_on.get(name) == stamps:
            return
        try:
            await self.load(name)
        except ServingError:
            self._failed_on[name] = stamps  # recorded in _failures; the old versions keep serving
            return
        self._failed_on.pop(name, None)
        self._seen.pop(name, None)

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        models = self.loaded()
        self._models.clear()
        self._update_gauge()
        await asyncio.gather(*(m.close(self.settings.grace_period_s) for m in models))
        await asyncio.gather(*self._closing, return_exceptions=True)

    async def _notify(self, name: str, serving: bool) -> None:
        if self.on_change is not None:
            await self.on_change(name, serving)

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _update_gauge(self) -> None:
        self.metrics.models_loaded.set(sum(len(v) for v in self._models.values()))


def _file_stamp(path) -> tuple:
    try:
        stat = path.stat()
    except OSError as err:
        raise ModelLoadError(f"cannot read {path}: {err}") from err
    return (str(path), stat.st_mtime_ns, stat.st_size)
