"""Every key this package reads or writes in an FX node's metadata, in one place.

Two live in ``node.meta["custom"]``, which Dynamo and AOTAutograd carry from
the user's code to the joint graph (``torch.fx.traceback.annotate``); the
others live in ``node.meta`` itself and are set by a stage of this package:

==================  =================  ==========================================
key                 set by             holds
==================  =================  ==========================================
MARK_KEY            marking            ``meta["custom"]``: a module / region mark
                                       (dict: mode, roles, qualname, source)
TENSOR_MARK_KEY     marking            ``meta["custom"]``: "offload" / "keep" on a
                                       view node made by mark_offload /
                                       mark_not_offload
REQUEST_KEY         annotation         what the user asked (``Request``)
TENSOR_REQUEST_KEY  annotation         per-tensor marks (frozenset of modes)
CHOSEN_KEY          rewriting          what the plan chose (``Decision``) on a
                                       saved tensor's forward node; the
                                       invariant check reads it
CREATED_BY_KEY      rewriting          which pass made a node ("rewrite")
REPLACES_KEY        rewriting          on a reload or rebuilt view: the name of
                                       the saved tensor it stands for
LAYOUT_FREE_KEY     rewriting          on an offload: True where its host copy
                                       stands for its source alone (no view is
                                       rebuilt from it by traced strides), so
                                       any dense layout may be copied as is
==================  =================  ==========================================
"""

MARK_KEY = "offload_pass"
TENSOR_MARK_KEY = "offload_pass_tensor"
REQUEST_KEY = "offload_pass_request"
TENSOR_REQUEST_KEY = "offload_pass_tensor_request"
CHOSEN_KEY = "offload_pass_chosen"
CREATED_BY_KEY = "offload_pass_created_by"
REPLACES_KEY = "offload_pass_replaces"
LAYOUT_FREE_KEY = "offload_pass_layout_free"
