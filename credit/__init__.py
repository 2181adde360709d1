"""The credit page (`python -m credit.page RUN`): one prompt's group, token by token, coloured by the
advantage each token trains on (README "See the credit")."""
