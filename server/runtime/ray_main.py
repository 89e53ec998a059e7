"""`python -m server`: start a local Ray instance on 127.0.0.1, run the Serve app, shut down cleanly.

Joining an existing (multi-machine) cluster is deliberate: `--ray-address HOST:PORT` (never the default).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import replace

from ..settings import Settings
from .autoscaling import SHUTDOWN_MARGIN_S, ReplicaCount, Scaling, graceful_shutdown_timeout_s, running_replicas

APP_NAME = "s2s"
log = logging.getLogger("server")


# Read by Serve's HTTP proxies at start, on any cluster: a request whose replica died is sent once more, to another
# replica, and answers 503 with Retry-After only if that fails too (runtime.replica_lost).
PROXY_ENV = {"RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": "server.runtime.replica_lost.proxy_middlewares"}

# Read by Ray at import, inherited by every process of a local instance: loopback only, and proxy checks
# patient enough for a small busy machine (Serve restarts a proxy that is not ready within 5 s by default).
LOCAL_RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60",
                 "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "30", **PROXY_ENV}


def keep_replica_grpc_on_loopback() -> None:
    """Ray worker setup hook for local instances: Serve 2.60 binds each replica's inter-deployment gRPC server
    to "[::]:0" (all interfaces) with no setting to change it; bind it to 127.0.0.1 instead."""
    if os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") != "0":
        return
    from ray.serve._private import replica

    bind = replica.add_port_to_grpc_server
    replica.add_port_to_grpc_server = lambda server, address: bind(server, address.replace("[::]", "127.0.0.1"))


def local_runtime_env(metrics_dir: str) -> dict:
    """The runtime_env of every Ray process this project starts locally."""
    return {"env_vars": {"PROMETHEUS_MULTIPROC_DIR": metrics_dir},
            "worker_process_setup_hook": "server.runtime.ray_main.keep_replica_grpc_on_loopback"}


def start_ray(address: str | None, metrics_dir: str) -> None:
    """Must run before anything imports ray: Ray reads the loopback setting at import."""
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # this process (the driver) too
    if not address:
        for key, value in LOCAL_RAY_ENV.items():
            os.environ.setdefault(key, value)
    import ray

    if address:
        ray.init(address=address, runtime_env={"env_vars": {"PROMETHEUS_MULTIPROC_DIR": metrics_dir}},
                 log_to_driver=False)
    else:  # a fresh local instance, loopback only, no dashboard
        def start() -> None:
            ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                     runtime_env=local_runtime_env(metrics_dir), log_to_driver=False)

        try:
            start()
        except Exception as error:  # Ray raises a bare Exception for it
            # Ray gives its raylet a fixed 30 s to register, which a machine busy starting other processes can
            # exceed; a second start on a clean slate succeeds where the first timed out.
            if "timed out during startup" not in str(error):
                raise
            log.warning("Ray's node did not register within Ray's 30 s; starting it once more")
            ray.shutdown()
            start()


def stop_serve() -> None:
    """Serve's controller deletes the application (each replica finishes its requests first, for up to
    graceful_shutdown_timeout_s) and its proxies, then kills itself; this returns once it has. serve.shutdown
    waits the same way, but on a call that Serve lets Ray retry without end: its controller's death fails that
    call, and Ray logs it as an error at every stop ("Task ServeController.graceful_shutdown failed ... will be
    retried"). Here the call is not retried: the controller's death is its answer."""
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    if not ray.is_initialized():  # Ray never started
        return
    try:
        controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    except ValueError:  # Serve never started
        return
    try:
        ray.get(controller.graceful_shutdown.options(max_task_retries=0).remote())
    except ray.exceptions.RayActorError:
        pass


def shutdown(timeout_s: float) -> None:
    """Serve first, then Ray. Bounded by `timeout_s`: stopping Serve hangs if Ctrl-C already killed Ray's own
    processes."""
    import ray

    stopper = threading.Thread(target=stop_serve, daemon=True)
    stopper.start()
    stopper.join(timeout_s)
    if stopper.is_alive():
        log.warning("Serve did not stop within %.0f s; stopping Ray", timeout_s)
    ray.shutdown()


def gpus_available() -> bool:
    import ray

    return ray.cluster_resources().get("GPU", 0) > 0


def wait_ready(url: str, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as response:
                if response.status == 200:
                    return time.monotonic() - start
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    raise TimeoutError(f"{url} was not ready after {timeout_s} s")


def serve_with_ray(args: argparse.Namespace, settings: Settings, registry) -> int:
    """`registry`: a front.ModelRegistry (imported by the caller, after Ray's environment is set here)."""
    stop = threading.Event()
    metrics_dir = tempfile.mkdtemp(prefix="s2s-metrics-")
    started = time.monotonic()
    try:
        # a local instance's proxies bound their retry of a lost replica's request by it (runtime.replica_lost)
        os.environ[Settings.env_name("request_timeout_s")] = str(settings.request_timeout_s)
        start_ray(args.ray_address, metrics_dir)
        from ray import serve

        from .deployment import build, deploy

        # ray.init installs its own SIGTERM handler, and a background job may ignore SIGINT: set both here.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        scaling = scaling_of(args)
        settings = replace(settings, replica_http=not args.serve_proxy)
        serve.start(proxy_location="Disabled" if settings.replica_http else None,
                    http_options={"host": settings.host, "port": settings.port})
        gpu = gpus_available() and settings.device in ("auto", "cuda")
        app = build(settings, registry, args.replicas, num_cpus=args.replica_cpus,
                    num_gpus=args.replica_gpus if gpu else 0, scaling=scaling)
        deploy(app, APP_NAME, route_prefix="/")
        url = f"http://{settings.host}:{settings.port}"
        ready_after = wait_ready(url, 300)
        print(f"serving at {url} (ready {time.monotonic() - started:.1f} s after start, "
              f"{ready_after:.1f} s after deploy); Ctrl-C or SIGTERM stops", flush=True)
        # A timed wait: Python runs a signal's handler in the main thread, which a signal delivered to another
        # thread (Ray's do not block signals) does not wake from a wait without a timeout.
        replicas = ReplicaCount(log)
        while not stop.wait(0.5):
            try:
                replicas.update(running_replicas(APP_NAME, "Seq2SeqServer"))
            except Exception as e:  # the controller restarting, or Ray stopping under a Ctrl-C: serving goes on
                log.debug("replica count unavailable: %s", e)
        return 0
    finally:
        print("shutting down", flush=True)
        # the replicas' drain, then the controller's own teardown
        shutdown(graceful_shutdown_timeout_s(settings) + SHUTDOWN_MARGIN_S)
        shutil.rmtree(metrics_dir, ignore_errors=True)


def scaling_of(args: argparse.Namespace) -> Scaling | None:
    """The autoscaling the flags ask for; None: a fixed --replicas. Raises ValueError for flags that disagree."""
    bounds = (args.min_replicas, args.max_replicas)
    delays = (args.upscale_delay_s, args.downscale_delay_s)
    if bounds == (None, None):
        if delays != (None, None):
            raise ValueError("--upscale-delay-s and --downscale-delay-s need --min-replicas and --max-replicas")
        return None
    if None in bounds:
        raise ValueError("autoscaling needs both --min-replicas and --max-replicas")
    if args.replicas != 1:
        raise ValueError("--replicas is a fixed count: give it or --min-replicas/--max-replicas, not both")
    return Scaling(*bounds, *delays)


def add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ray-address", help="join this Ray cluster instead of starting a local one")
    parser.add_argument("--serve-proxy", action="store_true",
                        help="HTTP through Serve's proxies, which hand each request to a replica (by default each "
                             "replica serves HTTP on the port itself)")
    parser.add_argument("--replica-cpus", type=float, default=1)
    scaling = parser.add_argument_group("autoscaling (on the engines' batch rows, deploy/README.md)")
    scaling.add_argument("--min-replicas", type=int, help="replicas kept when idle; with --max-replicas")
    scaling.add_argument("--max-replicas", type=int, help="replicas under load at most; with --min-replicas")
    scaling.add_argument("--upscale-delay-s", type=float, help="load must last this long before a replica is added "
                                                               "(default: the profile's, deploy/README.md)")
    scaling.add_argument("--downscale-delay-s", type=float,
                         help="load must have dropped this long before a replica is removed (default: the profile's)")
    parser.add_argument("--replica-gpus", type=float, default=1, help="GPUs per replica when the machine has any")
