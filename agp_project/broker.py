"""The embedded broker: kombu's filesystem transport, with messages that appear whole.

kombu's filesystem transport creates a message's file, then writes it; a consumer polling
the folder may take the file in between and read nothing, and the worker stops on the
undecodable message ("Unrecoverable error: JSONDecodeError"). Here a message is written
under a name consumers pass over (it does not end in ``.<queue>.msg``) and renamed into
place when complete: a rename within one folder is atomic, so a consumer sees the whole
message or none of it. ``_put`` is the method a kombu virtual transport implements to
store a message (kombu.transport.virtual.Channel); nothing else changes.
"""

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem

from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = f"{final}.part"
        try:
            with open(partial, "wb") as part:
                part.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
