"""The content decision: one :class:`~crawler.dedup.decider.ContentDecider` per crawler decides
each page's fate (kept, exact or near duplicate, a person's rule) with its parts, and the rules it
obeys: the preference order (``preference``), a person's overrides (``overrides``) and the
settle step (``settle``), which are plain libraries.
"""

__floor__ = "component"
