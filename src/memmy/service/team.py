"""The people of a team server: add (a token shown once), list, revoke, and who a presented token belongs to.

Only the owner (the token in ``storage.token``) manages people; every change is an audit row naming who did it.
"""

from __future__ import annotations

import re

from memmy.commands.answers import People, Person, PersonAdded
from memmy.config import new_token
from memmy.errors import InvalidArgument
from memmy.namespace import Namespace
from memmy.service.governance import GovernanceOps
from memmy.store.team import Member, TeamMembers

#: A person's name: what memories and audit rows show as their author.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


def checked_name(name: object) -> str:
    """A valid person name, else a clear error."""
    if not isinstance(name, str) or not NAME_RE.match(name.strip()):
        raise InvalidArgument("name: 1-64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit")
    return name.strip()


def person_answer(member: Member) -> Person:
    """The API's shape of one person."""
    return {"name": member.name, "createdAt": member.created_at, "revokedAt": member.revoked_at}


class TeamOps:
    """Team membership over the store's ``team_members`` table."""

    def __init__(self, members: TeamMembers, governance: GovernanceOps, owner: str) -> None:
        self.members = members
        self.governance = governance
        #: The owner's own user id: a person may not take it (their memories would mix with the owner's).
        self.owner = owner

    def add(self, name: object, ns: Namespace) -> PersonAdded:
        """Add a person; the answer holds their token, which is not kept anywhere (only its hash is)."""
        person = checked_name(name)
        if person == self.owner:
            raise InvalidArgument(f"name: {person!r} is the owner's own user id; pick another name")
        token = new_token()
        member = self.members.add(person, token)
        self.governance.record("team.user.add", "person", person, ns)
        return {**person_answer(member), "token": token}

    def list(self) -> People:
        """Everyone, revoked people included."""
        return {"items": [person_answer(m) for m in self.members.members()]}

    def revoke(self, name: object, ns: Namespace) -> Person:
        """Refuse the person's token from the next request on."""
        member = self.members.revoke(checked_name(name))
        self.governance.record("team.user.revoke", "person", member.name, ns)
        return person_answer(member)

    def person_for(self, token: str) -> str | None:
        """Whose live token this is (None: nobody's)."""
        return self.members.person_for(token)
