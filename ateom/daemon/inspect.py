"""The `ateom.Inspect` service: questions operators ask a running daemon."""

from __future__ import annotations

from typing import Any

import grpc

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from ateom.daemon.rpc import rpc
from ateom.daemon.service import AteomService, DaemonStatus


def doctor_response(report: Any) -> pb.DoctorResponse:
    """An `ateom.doctor.Report` -> wire (pure): the checks `ateom doctor --json` prints."""
    return pb.DoctorResponse(
        ok=report.ok,
        checks=[
            pb.DoctorCheck(name=r.name, status=_DOCTOR_STATUS[r.status.value],
                           summary=r.summary, fix=r.fix, details=list(r.details))
            for r in report.results
        ],
    )


# By the report's names, so this module need not import the doctor to load.
_DOCTOR_STATUS = {
    "PASS": pb.DOCTOR_STATUS_PASS,
    "WARN": pb.DOCTOR_STATUS_WARN,
    "FAIL": pb.DOCTOR_STATUS_FAIL,
    "SKIP": pb.DOCTOR_STATUS_SKIP,
}


def status_response(status: DaemonStatus) -> pb.GetStatusResponse:
    """DaemonStatus -> wire (pure)."""
    runsc = pb.RunscStatus()
    if status.runsc is not None:
        runsc = pb.RunscStatus(path=status.runsc.path, version=status.runsc.version,
                               supports_nvproxy=status.runsc.supports_nvproxy)
    return pb.GetStatusResponse(
        version=status.version,
        state=status.state,
        actors=[
            pb.HostedActor(actor_uid=a.ref.actor_uid, atespace=a.ref.atespace,
                           actor_name=a.ref.actor_name, phase=a.phase,
                           containers=list(a.containers), devices=list(a.devices),
                           sandbox_exited=a.sandbox_exited)
            for a in status.actors
        ],
        gpu_present=status.gpu_present,
        cdi_spec_source=status.cdi_spec_source,
        runsc=runsc,
        max_actors=status.max_actors,
        spec_dirs=list(status.spec_dirs),
    )


class InspectServicer(pb_grpc.InspectServicer):
    def __init__(self, service: AteomService) -> None:
        self.service = service

    @rpc("Inspect.GetStatus")
    def GetStatus(self, request: Any, context: grpc.ServicerContext) -> pb.GetStatusResponse:
        return status_response(self.service.status())

    @rpc("Inspect.ListDevices")
    def ListDevices(self, request: Any, context: grpc.ServicerContext) -> pb.ListDevicesResponse:
        from ateom.cdi.registry import Registry
        from ateom.cdi.spec_file import spec_problems

        registry = Registry.load(list(self.service.config.spec_dirs))
        return pb.ListDevicesResponse(
            devices=[
                pb.CdiDevice(
                    qualified_name=d.qualified_name,
                    kind=d.spec.kind,
                    spec_path=d.spec_path,
                    device_nodes=[
                        n.path
                        for n in (*d.spec.container_edits.device_nodes,
                                  *d.device.container_edits.device_nodes)
                    ],
                    device=d.device.name,
                    priority=d.priority,
                )
                for d in registry.devices()
            ],
            spec_dirs=list(registry.spec_dirs),
            spec_errors=[f"{path}: {p}" for path, e in registry.spec_errors.items()
                         for p in spec_problems(e)],
            conflicts=[f"{name}: {', '.join(files)}"
                       for name, files in registry.conflicts.items()],
            warnings=list(registry.warnings),
        )

    @rpc("Inspect.PlanInjection")
    def PlanInjection(self, request: Any, context: grpc.ServicerContext
                      ) -> pb.PlanInjectionResponse:
        names, diff = self.service.plan_injection(request.bundle_dir, list(request.devices))
        return pb.PlanInjectionResponse(devices=names, diff=diff)

    @rpc("Inspect.Doctor")
    def Doctor(self, request: Any, context: grpc.ServicerContext) -> pb.DoctorResponse:
        # A blocking call on this RPC thread (the server's pool runs each call
        # on its own thread; the service lets one report run at a time).
        return doctor_response(self.service.doctor(list(request.devices)))

