"""The member group's registration actions (a mixin of
:class:`~coordinator.member.group.MemberGroup`): register a member, look for an older live
registration with its id (invariant I3, the rule is the member machine's), give up, unregister.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from coordinator.member.standby_lag import StandbyLagReports
from coordinator.protocol.member_events import (
    CheckRegistration,
    MemberEvent,
    Register,
    Registered,
    RegistrationRefused,
    Unregister,
)
from metadata.errors import MetadataError
from metadata.zk import ZkMetadataStore

__all__ = ["RegistrationActions"]


class RegistrationActions:
    """Carries out :class:`Register`, :class:`CheckRegistration`, :class:`RegistrationRefused`
    and :class:`Unregister` for the group's members."""

    client: KazooClient
    store: ZkMetadataStore
    standby_lag: StandbyLagReports
    _register: Callable[[str, str, str, Mapping[str, Any]], str]
    _unregister: Callable[[str], None]
    _duplicate_wait_s: float | None
    _on_refused: Callable[[str, str, str], None] | None

    def _register_member(self, member: Any, _action: Register) -> list[MemberEvent]:
        pid = member.machine.processor_id
        member.node = self._register(pid, member.location_id, member.host, member.extra)
        member.log.info("processor.registered", node=member.node)
        self.standby_lag.registered(pid)
        return self._check_registration(member, CheckRegistration())

    def _check_registration(self, member: Any, _a: CheckRegistration) -> list[MemberEvent]:
        node = member.node
        assert node is not None  # (checked only while registered)
        if self._duplicate_wait_s is None:
            return [Registered(node)]
        older = self.store.processors.older_than(node, member.machine.processor_id)
        if older is None:
            return [Registered(node)]
        member.log.warning(
            "processor.duplicate_id",
            node=node,
            older=older.node,
            older_location=older.location_id,
            checks_left=member.machine.checks_left,
        )
        return [Registered(node, duplicate_of=older.node)]

    def _refused(self, member: Any, action: RegistrationRefused) -> list[MemberEvent]:
        pid = member.machine.processor_id
        member.log.error(
            "processor.registration_refused", node=action.node, older=action.duplicate_of
        )
        if self._on_refused is not None:
            self._on_refused(pid, action.node, action.duplicate_of)
        return []

    def _unregister_member(self, member: Any, _action: Unregister) -> list[MemberEvent]:
        node, member.node = member.node, None
        if node is not None and self.client.connected:
            try:
                self._unregister(node)
            except (MetadataError, KazooException) as exc:
                # Shutting down anyway: the node is ephemeral and goes with the session.
                member.log.warning("processor.unregister_failed", node=node, error=repr(exc))
        return []

    def _register_in_store(
        self, processor_id: str, location_id: str, host: str, extra: Mapping[str, Any]
    ) -> str:
        return self.store.processors.register(processor_id, location_id, host, **extra)
