"""GPU offers from Prime Intellect, Vast.ai, Lambda and RunPod, normalised to one :class:`Offer` and ranked by
estimated dollars per completed run. One module per provider: ``parse(payload)`` and an async
``fetch(client, api_key, ...)``; ``fetch_all`` runs them concurrently; ``ranking`` prices a run."""
