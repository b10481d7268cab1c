"""Framework adapters: let an agent framework's own human-in-the-loop ask through the hub.

Each adapter is an extra, imported by its own module path, never from here, so that
``import client_sdk`` stays as light as the core install::

    pip install 'a2h-hub[langgraph]'        # client_sdk.integrations.langgraph
    pip install 'a2h-hub[openai-agents]'    # client_sdk.integrations.openai_agents
"""
