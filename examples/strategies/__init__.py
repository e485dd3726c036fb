"""Strategy files shipped with the zoo (``flexrt simulate MODEL --strategy FILE``)."""
